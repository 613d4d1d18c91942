// StepRunner: the model-and-optimizer side of a training run, as the loop in trainer.cpp drives
// it; one implementation serves every layout, one process included (parallel_runner.h). The
// loop itself (schedule, evaluation cadence, metrics, progress, checkpoint cadence) is the same
// for all of them.
//
//   auto r = make_step_runner(cfg, vocab_size, ParallelJob::single(cfg.parallel, Device::cuda(0)));
//   r->set_lr(schedule.lr(step));
//   StepResult res = r->train_step(step, train_loader);   // res.loss: the global batch's mean loss
//   double val = r->eval_loss(val_loader, cfg.train.eval_batches);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "trireme/graph/trace.h"
#include "trireme/io/config.h"
#include "trireme/io/data_loader.h"
#include "trireme/models/gpt.h"
#include "trireme/optim/optimizer.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/precision.h"

namespace trireme::train {

struct StepResult {
  double loss = 0;       // mean over the whole global batch, the same on every rank
  double grad_norm = 0;  // global L2 norm of the gradient before clipping (NaN: step skipped)
  // train.precision = "f16": the loss scale after this step and the steps skipped so far.
  std::optional<double> loss_scale;
  std::optional<int64_t> skipped_steps;
  // train.mode = "static": the graphs traced so far (1, plus one per retrace).
  std::optional<int64_t> graph_traces;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  virtual int rank() const { return 0; }  // global rank: 0 prints, writes metrics and plots
  // Where this rank's model, batches and optimizer state live (the CPU, or one GPU).
  virtual Device device() const = 0;
  virtual std::string describe_layout() const = 0;
  // What a checkpoint records and resume compares: {"dp", "tp", "pp", "virtual_stages", "zero"}.
  virtual nlohmann::json layout_json() const = 0;
  virtual int64_t num_parameters() = 0;  // of the whole model, tied weights once

  virtual void set_lr(double lr) = 0;
  // One optimizer step on global batch `step` (every rank reads its part of it).
  virtual StepResult train_step(int64_t step, const io::DataLoader& train) = 0;
  // Mean loss over batches 0..batches-1 of `val` (global batch size), without dropout.
  virtual double eval_loss(const io::DataLoader& val, int64_t batches) = 0;
  // A classifier's (Note [classifier head], models/gpt.h) logits at each sample's one counted
  // target (not -100), for the samples of batches 0..batches-1 of `val` in order, without
  // dropout: (batches x batch_size, num_classes) f32 on the CPU, the same on every rank.
  virtual Tensor eval_class_logits(const io::DataLoader& val, int64_t batches) = 0;

  // Writes a checkpoint (collective in parallel runners): ckpt.state is filled in, the runner
  // adds the model and optimizer state. Returns the checkpoint folder.
  virtual std::filesystem::path save(const std::filesystem::path& root, Checkpoint ckpt) = 0;
  // Restores the model and optimizer from checkpoint folder `dir` (already read into ckpt).
  virtual void load(const std::filesystem::path& dir, const Checkpoint& ckpt) = 0;
  // Sets the model's parameters from single-process tensors (every rank passes the same ones),
  // leaving the optimizer as it is: `train --init-from`. A name missing, or a shape that differs
  // from this run's model, is an error naming the tensor and `source`.
  virtual void load_model(const std::map<std::string, Tensor>& full, const std::string& source) = 0;
  // Waits for every rank (no-op in one process).
  virtual void barrier() {}
  // train.mode = "static": runs one step on `b` eagerly (the optimizer's state comes to exist),
  // then traces the next on `b` and returns its graph as traced, before any pass (`trireme graph`).
  // Both steps train the model.
  virtual graph::TraceResult trace_step(const io::Batch& b) = 0;
};

// num_classes > 0: a sequence classifier over that many classes (Note [classifier head]).
models::GPTConfig gpt_config(const io::TrainConfig& cfg, int64_t vocab, int64_t num_classes = 0);
// AdamW or SGD over `params`, as cfg.optim says.
std::unique_ptr<optim::Optimizer> make_optimizer(const io::TrainConfig& cfg, const optim::NamedParams& params);
// Whether checkpoint `ckpt`'s optimizer files were cut for another layout than `layout` (a
// runner's layout_json(): dp, tp, pp, virtual_stages or zero differ). Such a checkpoint loads
// through load_whole_optimizer_state (Note [resuming in another layout],
// parallel/optimizer_reshard.h); the same layout loads each rank's own file, bit for bit.
bool optimizer_layout_differs(const Checkpoint& ckpt, const nlohmann::json& layout);
// The optimizer state of checkpoint folder `dir` (read into `ckpt`) as whole single-process
// tensors, reassembled from every rank's file by the layout state.json records; `model` is the
// run's model config (for the tensor-parallel cuts).
std::map<std::string, Tensor> load_whole_optimizer_state(const std::filesystem::path& dir, const Checkpoint& ckpt,
                                                         const models::GPTConfig& model);

// A scalar tensor's value on any device (Tensor::item() reads CPU tensors only).
double host_value(const Tensor& t);

}  // namespace trireme::train
