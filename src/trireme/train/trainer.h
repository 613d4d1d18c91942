// The trainer of every task (pretraining, SFT, classification: classifier.h) in every layout:
// data preparation, the GPT, the optimizer and schedule, the training loop with evaluation,
// metrics, progress and checkpoints, and exact resume.
//
//   io::Config cfg = io::Config::load("train.toml", {"train.steps=200"});
//   train::TrainSummary s = train::Trainer(cfg, {.resume = true}).run();
//
// The trainer holds out_dir/.lock while it exists (rank 0 of a parallel run); a fresh run into a
// folder holding another run throws RunRefused unless options.overwrite (see run_dir.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/train/run_dir.h"

namespace trireme::train {

struct TrainOptions {
  bool resume = false;          // continue from the newest complete checkpoint in out_dir (the
                                // one `latest` names, else found by scanning); never from step 0
                                // over existing checkpoints
  bool overwrite = false;       // a fresh run into an out_dir holding another run: remove that
                                // run's checkpoints and metrics (without it: RunRefused)
  bool interactive = false;     // draw a live progress bar (default: plain log lines)
  bool quiet = false;           // no progress output (tests)
  int64_t stop_after = 0;       // end this invocation after this global step (0 = train.steps),
                                // checkpointing there: what an interrupted run leaves behind
  std::string init_from;        // a fresh run (step 0, new optimizer) from the model weights of a
                                // checkpoint or Hugging Face folder (load_trained_model's forms)
};

struct TrainSummary {
  int64_t steps = 0;             // steps completed in total (including before a resume)
  int64_t tokens = 0;            // tokens trained on in this invocation
  double seconds = 0;            // wall time of this invocation's loop
  double tokens_per_s = 0;
  double first_loss = 0, final_loss = 0;
  double initial_val_loss = 0;   // before the first step of a fresh run (NaN when resuming)
  double best_val_loss = 0, final_val_loss = 0;
  double unigram_entropy = 0;    // nats/token of the training tokens' unigram distribution
  int64_t vocab_size = 0;
  int64_t num_parameters = 0;
  int64_t peak_memory_bytes = 0;  // this rank's device high-water mark of tensor bytes (metrics' peak_memory_bytes)
  int64_t estimated_peak_bytes = 0;  // what train/memory_estimate.h predicted for it
  std::string out_dir, metrics_path, plot_path, checkpoint_path;
  std::vector<double> losses;    // per step of this invocation, for resume-equality checks
  // finetune.task = "classify": the label set, the last evaluation's validation accuracy and
  // macro-F1, and the accuracy of always predicting the training set's most frequent label.
  std::vector<std::string> labels;
  double val_accuracy = NAN, val_macro_f1 = NAN, majority_accuracy = NAN;
  // A resume of a run that had reached train.steps: nothing was trained; `message` says so.
  bool already_finished = false;
  std::string message;
};

class Trainer {
 public:
  Trainer(const io::Config& config, TrainOptions options = {});
  ~Trainer();
  TrainSummary run();

  struct State;  // everything the run holds; defined in trainer.cpp

 private:
  std::unique_ptr<State> s_;
};

// Cross-entropy of the best constant (unigram) predictor: -sum p log p over token frequencies.
double unigram_entropy(const std::vector<int32_t>& tokens, int64_t vocab_size);

}  // namespace trireme::train
