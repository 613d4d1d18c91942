// Sequence classification (see classifier.h).
#include "trireme/train/classifier.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "trireme/cuda/device.h"
#include "trireme/dist/env.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/file_write.h"
#include "trireme/io/labeled_text.h"
#include "trireme/optim/lr_schedule.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/classification_metrics.h"
#include "trireme/train/finetune_data.h"
#include "trireme/train/parallel_runner.h"
#include "trireme/train/resume_choice.h"
#include "trireme/train/run_dir.h"
#include "trireme/train/trained_model.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {

// A file's texts as packed sequences of block_size + 1 tokens (Note [packed sequences],
// io/data_loader.h) for the step runner: the text's ids (cut to block_size) padded with 0, and
// the class index as the target of the text's last token, every other target masked (Note
// [classifier head], models/gpt.h). Causal attention: what follows the last token changes
// nothing before it.
struct ClassSequences {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int> labels;  // per text, in file order
};

ClassSequences encode(const std::vector<io::LabeledText>& examples, const io::Tokenizer& tok,
                      const std::vector<std::string>& labels, int64_t block_size, const std::string& file) {
  ClassSequences e;
  const size_t L = size_t(block_size) + 1;
  for (const auto& ex : examples) {
    auto it = std::find(labels.begin(), labels.end(), ex.label);
    if (it == labels.end()) {
      std::string set;
      for (const auto& l : labels) set += (set.empty() ? "\"" : ", \"") + l + "\"";
      throw io::ConfigError(str_cat(file, " line ", ex.line, ": label \"", ex.label, "\" is not in the label set (",
                                    set, "); fix the line or add the label to finetune.labels"));
    }
    std::vector<int32_t> ids = tok.encode(ex.text);
    if (int64_t(ids.size()) > block_size) ids.resize(size_t(block_size));
    const size_t last = std::max<size_t>(ids.size(), 1) - 1, at = e.tokens.size();
    e.tokens.resize(at + L, 0);
    e.mask.resize(at + L, 0);
    std::copy(ids.begin(), ids.end(), e.tokens.begin() + int64_t(at));
    const int label = int(it - labels.begin());
    e.tokens[at + last + 1] = label, e.mask[at + last + 1] = 1;
    e.labels.push_back(label);
  }
  return e;
}

// What rank 0 checks and clears before a run writes into out_dir (as the trainer does).
std::unique_ptr<RunLock> claim_out_dir(const fs::path& out, const TrainOptions& options) {
  fs::create_directories(out);
  auto lock = std::make_unique<RunLock>(out);
  if (options.resume && options.overwrite)
    throw RunRefused("--resume continues the run in train.out_dir and --overwrite removes it; give one of them");
  if (!options.resume) {
    if (auto what = earlier_run(out)) {
      if (!options.overwrite) throw RunRefused(earlier_run_refusal(out, *what));
      remove_earlier_run(out);
    }
  }
  return lock;
}

// This process's part of the run's layout: one process, or a rank of cfg.parallel's job.
std::shared_ptr<ParallelJob> connect_job(const io::TrainConfig& cfg, const dist::DistEnv& env) {
  const Device device = Device::parse(cfg.train.device);
  if (env.world_size > 1 || cfg.parallel.world_size() > 1) return ParallelJob::connect(cfg.parallel, env, device.type);
  if (cfg.parallel.zero > 0)
    throw io::ConfigError(str_cat("parallel.zero: ZeRO-", cfg.parallel.zero, " shards over data-parallel processes, ",
                                  "but this is one process; set parallel.dp >= 2 (with --nproc) or parallel.zero = 0"));
#ifdef TRIREME_WITH_CUDA
  if (device.is_cuda()) cuda::set_device(device.index);  // kernels launch on the current GPU
#endif
  return ParallelJob::single(cfg.parallel, device);
}

}  // namespace

ClassifierSummary run_classifier(const io::Config& config, const TrainOptions& options) {
  const io::TrainConfig cfg = config.resolve();
  const io::FinetuneConfig& f = cfg.finetune;
  const dist::DistEnv env = dist::dist_env_from_environment();
  const bool main_rank = env.rank == 0;  // speaks, writes metrics and owns out_dir
  auto log = [&](const std::string& s) {
    if (!options.quiet && main_rank) std::fprintf(stderr, "%s\n", s.c_str());
  };
  const fs::path out = cfg.train.out_dir;
  std::unique_ptr<RunLock> lock;  // held until the run is over
  if (main_rank) lock = claim_out_dir(out, options);
  std::shared_ptr<ParallelJob> job = connect_job(cfg, env);
  const std::optional<fs::path> resume_from =
      options.resume ? choose_resume_checkpoint(out / "checkpoints", job->world.get(), job->device, log) : std::nullopt;
  if (!resume_from && options.init_from.empty())
    throw io::ConfigError("finetune.task = \"classify\": a classifier starts from a trained model; give --init-from "
                          "CHECKPOINT|RUN|HF_DIR");

  // The examples and the label set (a resumed run keeps its own).
  const bool skip = f.bad_lines == "skip";
  io::LabeledFile train_file = io::read_labeled_file(f.train_file, skip);
  std::vector<io::LabeledText> train_ex, val_ex;
  std::string val_name = f.val_file;
  if (!f.val_file.empty()) {
    train_ex = std::move(train_file.examples);
    val_ex = io::read_labeled_file(f.val_file, skip).examples;
  } else {
    val_name = f.train_file;
    const auto held = held_out_examples(train_file.examples.size(), f.val_fraction, uint64_t(cfg.data.split_seed));
    if (held.empty()) throw io::ConfigError(str_cat("finetune.train_file: too few examples to hold some out; give finetune.val_file"));
    for (size_t i = 0; i < train_file.examples.size(); ++i)
      (std::binary_search(held.begin(), held.end(), i) ? val_ex : train_ex).push_back(train_file.examples[i]);
  }
  Checkpoint resumed;
  if (resume_from) resumed = load_checkpoint(*resume_from);
  std::vector<std::string> labels = f.labels;
  if (resume_from && resumed.state.contains("labels")) labels = resumed.state["labels"].get<std::vector<std::string>>();
  if (labels.empty()) {
    std::set<std::string> seen;
    for (const auto& ex : train_ex) seen.insert(ex.label);
    labels.assign(seen.begin(), seen.end());
  }
  if (labels.size() < 2) throw io::ConfigError("finetune.labels: a classifier needs at least two labels");

  std::unique_ptr<io::Tokenizer> tok =
      resume_from ? io::tokenizer_from_json(resumed.state["tokenizer"]) : tokenizer_of(options.init_from, "finetune");
  // A class index is a token of its packed sequence too (an input after the last text token).
  if (int64_t(labels.size()) > tok->vocab_size())
    throw io::ConfigError(str_cat("finetune.labels: ", labels.size(), " labels, more than the tokenizer's ",
                                  tok->vocab_size(), " tokens; a classifier takes at most as many labels as tokens"));
  const int64_t T = cfg.model.block_size;
  ClassSequences train = encode(train_ex, *tok, labels, T, f.train_file);
  const ClassSequences val = encode(val_ex, *tok, labels, T, val_name);
  const std::vector<int> train_labels = train.labels;
  const io::DataLoader train_loader(std::move(train.tokens), std::move(train.mask), T, uint64_t(cfg.train.seed));
  const io::DataLoader val_loader(val.tokens, val.mask, T, uint64_t(cfg.train.seed));

  // The model, one rank's part of it: the base's weights (or the run's own on resume) and a head
  // over the labels, trained by the runner every layout shares.
  std::unique_ptr<StepRunner> runner = make_step_runner(cfg, tok->vocab_size(), job, int64_t(labels.size()));
  int64_t start = 0;
  if (resume_from) {
    runner->load(*resume_from, resumed);
    start = resumed.step;
  } else {
    TrainedModel base = load_trained_model(options.init_from, Device::cpu(), "finetune", /*memory_check=*/false);
    const nn::NamedTensors full = base.model->full_state_dict();
    try {
      runner->load_model({full.begin(), full.end()}, str_cat("--init-from '", options.init_from, "'"));
    } catch (const io::ConfigError&) {
      throw;
    } catch (const Error& e) {
      throw io::ConfigError(str_cat(e.what(), "; set [model] to match"));
    }
  }
  std::unique_ptr<optim::LrSchedule> schedule;
  if (cfg.schedule.kind == "cosine") {
    schedule = std::make_unique<optim::WarmupCosineLr>(
        optim::WarmupCosineOptions{.max_lr = cfg.optim.lr, .min_lr = cfg.schedule.min_lr,
                                   .warmup_steps = cfg.schedule.warmup_steps, .total_steps = cfg.train.steps});
  } else {
    schedule = std::make_unique<optim::ConstantLr>(cfg.optim.lr);
  }

  ClassifierSummary sum;
  sum.labels = labels;
  std::vector<int> counts(labels.size(), 0);
  for (int l : train_labels) ++counts[size_t(l)];
  const int majority = int(std::max_element(counts.begin(), counts.end()) - counts.begin());
  for (int l : val.labels) sum.majority_accuracy += l == majority;
  sum.majority_accuracy /= double(val.labels.size());
  log(str_cat("classify: ", train_labels.size(), " training and ", val.labels.size(), " validation texts, ",
              labels.size(), " labels", train_file.skipped ? str_cat("; ", train_file.skipped, " malformed line(s) skipped") : "",
              "; majority-class baseline (\"", labels[size_t(majority)], "\") ", sum.majority_accuracy, "; layout: ",
              runner->describe_layout()));

  const int64_t B = cfg.train.batch_size;
  auto evaluate = [&](nlohmann::json& line) {
    // Whole batches cover the validation texts; the samples past them (the next epoch's) are left out.
    const int64_t n = int64_t(val.labels.size()), batches = (n + B - 1) / B;
    const Tensor logits = runner->eval_class_logits(val_loader, batches);
    const float* all = logits.data<float>();
    const size_t C = labels.size();
    std::vector<int> truth, predicted;
    double loss = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int label = val.labels[size_t(val_loader.sample_start(k) / (T + 1))];
      const float* row = all + size_t(k) * C;
      const float top = *std::max_element(row, row + C);
      double sum_exp = 0;
      for (size_t c = 0; c < C; ++c) sum_exp += std::exp(double(row[c]) - double(top));
      loss += double(top) + std::log(sum_exp) - double(row[label]);
      truth.push_back(label);
      predicted.push_back(int(std::max_element(row, row + C) - row));
    }
    const ClassificationMetrics m = classification_metrics(truth, predicted, int(C));
    sum.val_accuracy = m.accuracy, sum.val_macro_f1 = m.macro_f1, sum.val_loss = loss / double(n);
    line["val_loss"] = sum.val_loss, line["val_accuracy"] = m.accuracy, line["val_macro_f1"] = m.macro_f1;
    line["majority_accuracy"] = sum.majority_accuracy;
  };
  auto save = [&](int64_t step) {
    Checkpoint ck;
    ck.step = step;
    ck.state = {{"config", config.to_toml()}, {"tokenizer", tok->to_json()}, {"labels", labels},
                {"task", "classify"}, {"layout", runner->layout_json()}};
    sum.checkpoint_path = runner->save(out / "checkpoints", std::move(ck)).string();
  };

  sum.metrics_path = (out / "metrics.jsonl").string();
  std::unique_ptr<io::AppendFile> metrics;
  if (main_rank)
    metrics = std::make_unique<io::AppendFile>(sum.metrics_path, start > 0 ? io::AppendFile::Mode::kAppend
                                                                           : io::AppendFile::Mode::kTruncate);
  const int64_t last = options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  int64_t step = start;
  for (; step < last; ++step) {
    runner->set_lr(schedule->lr(step));
    const StepResult r = runner->train_step(step, train_loader);
    TRIREME_CHECK(std::isfinite(r.loss), "classify: the loss is ", r.loss, " at step ", step + 1, " (try a lower optim.lr)");
    sum.losses.push_back(r.loss);
    const int64_t done = step + 1;
    nlohmann::json line{{"step", done}, {"loss", r.loss}, {"lr", schedule->lr(step)}, {"grad_norm", r.grad_norm}};
    if ((cfg.train.eval_interval > 0 && done % cfg.train.eval_interval == 0) || done == cfg.train.steps) {
      evaluate(line);
      log(str_cat("step ", done, ": loss ", r.loss, ", val_accuracy ", sum.val_accuracy, ", val_macro_f1 ",
                  sum.val_macro_f1, " (majority baseline ", sum.majority_accuracy, ")"));
    }
    if (metrics) metrics->write_line(line.dump());
    if ((cfg.train.checkpoint_interval > 0 && done % cfg.train.checkpoint_interval == 0) || done == last) {
      if (metrics) metrics->sync();
      save(done);
    }
  }
  sum.steps = step;
  return sum;
}

}  // namespace trireme::train
