// The training loop (see trainer.h).
#include "trireme/train/trainer.h"

#include <cblas.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trireme/core/allocator.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/env.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/file_write.h"
#include "trireme/io/prepare.h"
#include "trireme/io/tokenizer.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/optim/lr_schedule.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/classifier.h"
#include "trireme/train/finetune_data.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/metrics.h"
#include "trireme/train/parallel_runner.h"
#include "trireme/train/plot.h"
#include "trireme/train/progress.h"
#include "trireme/train/resume_choice.h"
#include "trireme/train/run_dir.h"
#include "trireme/train/step_runner.h"
#include "trireme/train/throughput.h"
#include "trireme/train/trained_model.h"

namespace fs = std::filesystem;

namespace trireme::train {

double unigram_entropy(const std::vector<int32_t>& tokens, int64_t vocab_size) {
  std::vector<double> counts(size_t(vocab_size), 0.0);
  for (int32_t t : tokens) counts[size_t(t)] += 1.0;
  double h = 0, n = double(tokens.size());
  for (double c : counts) {
    if (c > 0) h -= c / n * std::log(c / n);
  }
  return h;
}

struct Trainer::State {
  io::Config config;
  io::TrainConfig cfg;
  TrainOptions options;
  fs::path out_dir;
  Device device;  // this process's: the CPU, or one GPU
  std::unique_ptr<io::Tokenizer> tokenizer;
  std::vector<int32_t> train_tokens, val_tokens;
  std::vector<uint8_t> train_mask, val_mask;     // finetune.task "sft" or "classify": packed sequences
  std::unique_ptr<ClassifierData> classes;       // finetune.task = "classify": labels, validation texts' labels
  std::optional<SftChatTemplate> chat_template;  // sft with finetune.chat_template: saved in checkpoints
  std::optional<fs::path> resume_from;           // --resume: the checkpoint chosen (none: start at step 0)
  std::shared_ptr<ParallelJob> job;   // null in one process
  std::unique_ptr<StepRunner> runner;
  std::unique_ptr<optim::LrSchedule> schedule;
  int64_t start_step = 0;
  double best_val_loss = INFINITY;
  std::string finished_message;  // resuming a run that already reached train.steps
  // Declared last so it is released last: rank 0 owns out_dir until everything is written.
  std::unique_ptr<RunLock> lock;
};

namespace {

void log_line(const TrainOptions& o, const std::string& line) {
  if (!o.quiet) std::fprintf(stderr, "%s\n", line.c_str());
}

// The data to train on: the folder `trireme prepare` wrote (data.dir), read as it is; or the corpus
// tokenized into out/data once, reused by later runs (and resumes) while the data section of the
// config is unchanged (spec.txt records it, written after the shards).
// Fine-tuning (SFT or classification): the examples of finetune.train_file packed with the
// tokenizer of the model the run starts from (--init-from; on --resume the run's own
// checkpoint's, whose label set a classifier keeps).
void prepare_finetune_data(Trainer::State& s) {
  const std::string& task = s.cfg.finetune.task;
  const std::string from = s.resume_from ? s.resume_from->string() : s.options.init_from;
  if (from.empty())
    throw io::ConfigError(str_cat("finetune.task = \"", task, "\": fine-tuning starts from a trained model; give ",
                                  "--init-from CHECKPOINT|RUN|HF_DIR (its tokenizer reads the examples)"));
  s.tokenizer = tokenizer_of(from, "finetune");
  if (task == "classify") {
    std::vector<std::string> labels;
    if (s.resume_from) {
      const auto state = nlohmann::json::parse(io::read_file(*s.resume_from / "state.json"));
      if (state.contains("labels")) labels = state["labels"].get<std::vector<std::string>>();
    }
    s.classes = std::make_unique<ClassifierData>(prepare_classifier_data(s.cfg, *s.tokenizer, std::move(labels)));
    log_line(s.options, s.classes->description);
    s.train_tokens = std::move(s.classes->train_tokens), s.train_mask = std::move(s.classes->train_mask);
    s.val_tokens = std::move(s.classes->val_tokens), s.val_mask = std::move(s.classes->val_mask);
    return;
  }
  s.chat_template = load_sft_chat_template(s.cfg, from, *s.tokenizer);
  SftData d = train::prepare_sft_data(s.cfg, *s.tokenizer, s.chat_template ? &*s.chat_template : nullptr);
  log_line(s.options, d.description);
  s.train_tokens = std::move(d.train.tokens), s.train_mask = std::move(d.train.loss_mask);
  s.val_tokens = std::move(d.val.tokens), s.val_mask = std::move(d.val.loss_mask);
}

void prepare_data(Trainer::State& s) {
  const io::DataConfig& dc = s.cfg.data;
  const bool main_rank = !s.job || s.job->env.rank == 0;
  fs::path data_dir = s.out_dir / "data";
  if (!dc.dir.empty()) {
    data_dir = dc.dir;
  } else {
    std::ostringstream spec_os;
    for (const auto& c : dc.corpus) spec_os << c << '\n';
    spec_os << dc.tokenizer << '\n' << dc.bpe_vocab_size << '\n' << dc.val_fraction << '\n'
            << "documents, seed " << dc.split_seed << '\n';
    // A tokenizer file used as it is: its bytes decide the tokens, so its checksum is in the spec.
    if (!dc.tokenizer_file.empty()) {
      std::string bytes;
      try {
        bytes = io::read_file(dc.tokenizer_file);
      } catch (const Error& e) {
        throw io::ConfigError(str_cat("data.tokenizer_file = \"", dc.tokenizer_file, "\": ", e.what()));
      }
      spec_os << "tokenizer file " << dc.tokenizer_file << ' ' << checkpoint_checksum(bytes) << '\n';
    }
    const std::string spec = spec_os.str();
    std::string old_spec;
    if (fs::exists(data_dir / "spec.txt")) old_spec = io::read_file(data_dir / "spec.txt");
    if (main_rank && (old_spec != spec || !fs::exists(data_dir / "train.bin") || !fs::exists(data_dir / "val.bin") ||
                      !fs::exists(data_dir / "tokenizer.json"))) {
      // The old spec goes first, so a preparation cut short is redone by the next run.
      std::error_code ec;
      fs::remove(data_dir / "spec.txt", ec);
      TRIREME_CHECK(!ec, "data: cannot remove '", (data_dir / "spec.txt").string(), "': ", ec.message());
      io::PreparedDataset d = io::prepare_from_config(dc, data_dir.string());
      io::write_file_atomic(data_dir / "spec.txt", spec);
      log_line(s.options, str_cat("data: ", d.train_tokens, " train and ", d.val_tokens, " validation tokens in ",
                                  data_dir.string(), "; ", d.split));
    }
    // The other ranks read what rank 0 prepared (a long wait: tokenizing can take minutes).
    if (s.job) s.job->world->barrier({.timeout = std::chrono::hours(1)})->wait();
  }
  io::PreparedData data;
  if (dc.dir.empty()) {
    data = io::load_prepared_dataset(data_dir.string());
  } else {
    try {
      data = io::load_prepared_dataset(data_dir.string());
    } catch (const Error& e) {
      throw io::ConfigError(str_cat("data.dir = \"", dc.dir, "\": ", e.what()));
    }
    log_line(s.options, str_cat("data: ", data.train.tokens.size(), " train and ", data.val.tokens.size(),
                                " validation tokens from ", dc.dir, " (", data.tokenizer->type(), " tokenizer, vocabulary ",
                                data.tokenizer->vocab_size(), ")"));
  }
  s.tokenizer = std::move(data.tokenizer);
  s.train_tokens = std::move(data.train.tokens);
  s.val_tokens = std::move(data.val.tokens);
  const int64_t T = s.cfg.model.block_size;
  TRIREME_CHECK(int64_t(s.train_tokens.size()) > T + 1, "data: the training split has ", s.train_tokens.size(),
                " tokens, fewer than model.block_size + 2 = ", T + 2, "; use more text or a smaller block_size");
  TRIREME_CHECK(int64_t(s.val_tokens.size()) > T + 1, "data: the validation split has ", s.val_tokens.size(),
                " tokens, fewer than model.block_size + 2 = ", T + 2, "; ",
                dc.dir.empty() ? "raise data.val_fraction" : "prepare with a larger --val-fraction", " or lower block_size");
}

// train.device as a Device this process can use, or a ConfigError saying why not (no GPU, a
// build without CUDA, an index past the last GPU). In a parallel
// run "cuda" means cuda:LOCAL_RANK for each process (ParallelJob::connect picks it).
Device resolve_device(const io::TrainConfig& cfg, bool parallel) {
  const Device d = Device::parse(cfg.train.device);
  if (d.is_cpu()) return d;
  const std::string key = str_cat("train.device = \"", cfg.train.device, "\"");
  if (parallel && cfg.train.device != "cuda") {
    throw io::ConfigError(str_cat(key, ": a parallel run gives each process the GPU cuda:LOCAL_RANK; ",
                                  "set train.device = \"cuda\""));
  }
  if (!cuda::is_available()) {
    throw io::ConfigError(str_cat(key, ", but no GPU can be used: ", cuda::unavailable_reason(),
                                  "; set train.device = \"cpu\" to train on the CPU"));
  }
  if (!parallel && d.index >= cuda::device_count()) {
    throw io::ConfigError(str_cat(key, ", but this machine has ", cuda::device_count(), " GPU",
                                  cuda::device_count() == 1 ? "" : "s", " (cuda:0 to cuda:", cuda::device_count() - 1, ")"));
  }
  return d;
}

// Validation loss over a fixed set of windows (the first eval_batches batches of a loader
// with its own seed), so every evaluation of a run measures the same samples. A classifier's is
// over every validation text, and `m` gets its accuracy and macro-F1 too.
double evaluate(Trainer::State& s, const io::DataLoader& val, StepMetrics* m = nullptr) {
  if (!s.classes) return s.runner->eval_loss(val, s.cfg.train.eval_batches);
  const ClassifierEvaluation e = evaluate_classifier(*s.runner, val, *s.classes, s.cfg.train.batch_size);
  if (m) m->val_accuracy = e.accuracy, m->val_macro_f1 = e.macro_f1, m->majority_accuracy = s.classes->majority_accuracy;
  return e.loss;
}

void save(Trainer::State& s, int64_t step, Progress& progress) {
  Checkpoint ck;
  ck.step = step;
  ck.state = {{"config", s.config.to_toml()},
              {"tokenizer", s.tokenizer->to_json()},
              {"data", {{"seed", s.cfg.train.seed}, {"next_step", step}}},
              {"layout", s.runner->layout_json()},
              {"best_val_loss", std::isfinite(s.best_val_loss) ? nlohmann::json(s.best_val_loss) : nlohmann::json()}};
  if (s.classes) ck.state["labels"] = s.classes->labels, ck.state["task"] = "classify";  // generate and eval refuse it
  if (s.chat_template) ck.state["chat_template"] = s.chat_template->to_json();
  fs::path p = s.runner->save(s.out_dir / "checkpoints", std::move(ck));
  if (!s.options.quiet) progress.note(str_cat("checkpoint: step ", step, " -> ", p.string()));
}

// `train --init-from`: the model's weights from a checkpoint or a Hugging Face folder, read whole
// on the host by every rank; the step, the optimizer and the data start afresh. A checkpoint of
// another model (another shape, another vocabulary) is a config error naming what differs.
void init_model_from(Trainer::State& s, const std::string& path) {
  TrainedModel from = load_trained_model(path, Device::cpu(), "train --init-from", /*memory_check=*/false);
  const std::string source = str_cat("train --init-from '", from.dir.string(), "'");
  const int64_t theirs = from.tokenizer->vocab_size(), ours = s.tokenizer->vocab_size();
  if (theirs != ours) {
    throw io::ConfigError(str_cat(source, ": its tokenizer has ", theirs, " tokens and this run's ", ours,
                                  "; train on its ids (data.tokenizer_file = a tokenizer.json of it) so that the "
                                  "embeddings mean the same tokens"));
  }
  const nn::NamedTensors full = from.model->full_state_dict();
  try {
    s.runner->load_model({full.begin(), full.end()}, source);
  } catch (const Error& e) {
    const io::ModelConfig& m = from.config.model;
    throw io::ConfigError(str_cat(e.what(), "; the checkpoint's model: arch = \"", m.arch, "\", d_model = ", m.d_model,
                                  ", n_layer = ", m.n_layer, ", n_head = ", m.n_head, ", block_size = ", m.block_size,
                                  "; set [model] to match"));
  }
  log_line(s.options, str_cat("init: the model's weights from ", from.dir.string(), " (its step ", from.step,
                              "); the optimizer and the step start afresh"));
}

// train.precision as the log shows it: what is stored, what the forward computes in, scaling.
std::string precision_description(const io::TrainConfig& cfg) {
  const std::string& p = cfg.train.precision;
  if (p == "bf16") return "bf16 (f32 master weights, bf16 autocast)";
  if (p == "f16") return str_cat("f16 (f32 master weights, f16 autocast, dynamic loss scale from ", cfg.train.loss_scale_init, ")");
  return "f32";
}

// Keeps the metrics lines up to `step` (what the checkpoint being resumed had seen); a line cut
// short by a crash is dropped. Replaced atomically: a failure leaves the old file.
void truncate_metrics(const fs::path& path, int64_t step) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const std::string text = io::read_file(path);
  std::string kept;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // no newline: the write was cut off
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  io::write_file_atomic(path, kept);
}

}  // namespace

Trainer::Trainer(const io::Config& config, TrainOptions options) : s_(std::make_unique<State>()) {
  State& s = *s_;
  s.config = config;
  s.cfg = config.resolve();
  s.options = options;
  s.out_dir = s.cfg.train.out_dir;
  if (s.cfg.train.threads > 0) {
#ifdef _OPENMP
    omp_set_num_threads(int(s.cfg.train.threads));
#endif
    openblas_set_num_threads(int(s.cfg.train.threads));
  }
  // A parallel run: the launcher's environment says we are one of several processes, or the
  // [parallel] section asks for several (ParallelJob::connect then says how to start them).
  const dist::DistEnv env = dist::dist_env_from_environment();
  const io::ParallelConfig& par = s.cfg.parallel;
  const bool parallel = env.world_size > 1 || par.world_size() > 1;
  s.device = resolve_device(s.cfg, parallel);
  // Before anything is written or removed: a run that cannot fit is refused with its estimate.
  // The processes of one machine share its memory (on the CPU) or get one GPU each.
  check_training_memory(s.cfg, /*vocab_size=*/0, s.device, std::max(env.local_world_size, 1));
  // Rank 0 alone owns the folder: it is the only process that writes the run's shared files
  // (metrics, plot, `latest`, rotation, renames); the other ranks only write into the temporary
  // checkpoint folder rank 0 made, and a refused job's other ranks never get that far.
  if (env.rank == 0) {
    fs::create_directories(s.out_dir);
    s.lock = std::make_unique<RunLock>(s.out_dir);
    if (options.resume && options.overwrite) {
      throw RunRefused("--resume continues the run in train.out_dir and --overwrite removes it; give one of them");
    }
    if (!options.resume) {
      if (auto what = earlier_run(s.out_dir)) {
        if (!options.overwrite) throw RunRefused(earlier_run_refusal(s.out_dir, *what));
        remove_earlier_run(s.out_dir);
        log_line(options, str_cat("overwrite: removed the earlier run's ", *what, " from ", s.out_dir.string()));
      }
    }
  }
  if (parallel) {
    s.job = ParallelJob::connect(par, env, s.device.type);
    s.device = s.job->device;
    if (env.rank != 0) s.options.quiet = true, s.options.interactive = false;  // rank 0 speaks for the job
  }
  fs::create_directories(s.out_dir);
  if (options.resume) {
    s.resume_from = choose_resume_checkpoint(s.out_dir / "checkpoints", s.job ? s.job->world.get() : nullptr, s.device,
                                             [&](const std::string& line) { log_line(s.options, line); });
  }
  if (s.cfg.finetune.task != "lm") {
    prepare_finetune_data(s);
  } else {
    prepare_data(s);
  }
  const int64_t vocab = s.tokenizer->vocab_size();
  const int64_t classes = s.classes ? int64_t(s.classes->labels.size()) : 0;
  if (s.job) {
    s.runner = make_step_runner(s.cfg, vocab, s.job, classes);
  } else if (par.zero > 0) {
    throw io::ConfigError(str_cat("parallel.zero: ZeRO-", par.zero, " shards over data-parallel processes, but this ",
                                  "is one process; set parallel.dp >= 2 (with --nproc) or parallel.zero = 0"));
  } else {
#ifdef TRIREME_WITH_CUDA
    if (s.device.is_cuda()) cuda::set_device(s.device.index);  // kernels launch on the current GPU
#endif
    // The model is initialised on the CPU (the same weights for every device), then moved.
    s.runner = make_step_runner(s.cfg, vocab, ParallelJob::single(par, s.device), classes);
  }
  if (s.cfg.schedule.kind == "cosine") {
    s.schedule = std::make_unique<optim::WarmupCosineLr>(
        optim::WarmupCosineOptions{.max_lr = s.cfg.optim.lr, .min_lr = s.cfg.schedule.min_lr,
                                   .warmup_steps = s.cfg.schedule.warmup_steps, .total_steps = s.cfg.train.steps});
  } else {
    s.schedule = std::make_unique<optim::ConstantLr>(s.cfg.optim.lr);
  }

  if (!options.init_from.empty()) init_model_from(s, options.init_from);
  if (options.resume) {
    if (const auto& latest = s.resume_from) {
      Checkpoint ck = load_checkpoint(*latest);
      // Another layout resumes too: the runner reassembles the per-rank optimizer state
      // (Note [resuming in another layout], parallel/optimizer_reshard.h); batches and dropout
      // masks are keyed by the step and the global sample, so they carry over by themselves.
      if (optimizer_layout_differs(ck, s.runner->layout_json())) {
        log_line(s.options, str_cat("resume: ", latest->string(), " was written with layout ",
                                  ck.state.value("layout", nlohmann::json()).dump(), "; this run has ",
                                  s.runner->layout_json().dump(), ", so its optimizer state is re-cut for it"));
      }
      s.runner->load(*latest, ck);
      s.start_step = ck.step;
      if (ck.state.contains("best_val_loss") && ck.state["best_val_loss"].is_number()) {
        s.best_val_loss = ck.state["best_val_loss"].get<double>();
      }
      log_line(s.options, str_cat("resume: from ", latest->string(), " at step ", ck.step));
      if (ck.step >= s.cfg.train.steps) {
        s.finished_message = str_cat("the run in ", s.out_dir.string(), " already finished at step ", ck.step,
                                     ck.step > s.cfg.train.steps ? str_cat(" (train.steps = ", s.cfg.train.steps, ")") : "",
                                     "; raise train.steps to continue");
      }
    } else {
      log_line(options, str_cat("resume: no checkpoint under ", (s.out_dir / "checkpoints").string(),
                                " yet, starting from step 0"));
    }
  }
}

Trainer::~Trainer() = default;

TrainSummary Trainer::run() {
  State& s = *s_;
  const auto& cfg = s.cfg;
  const int64_t B = cfg.train.batch_size, T = cfg.model.block_size;
  const uint64_t val_seed = uint64_t(cfg.train.seed) ^ 0x9e3779b97f4a7c15ull;
  const bool packed = cfg.finetune.task != "lm";  // SFT's and a classifier's sequences
  io::DataLoader train_loader = packed ? io::DataLoader(s.train_tokens, s.train_mask, T, uint64_t(cfg.train.seed))
                                       : io::DataLoader(s.train_tokens, T, uint64_t(cfg.train.seed));
  io::DataLoader val_loader =
      packed ? io::DataLoader(s.val_tokens, s.val_mask, T, val_seed) : io::DataLoader(s.val_tokens, T, val_seed);

  TrainSummary sum;
  sum.out_dir = s.out_dir.string();
  if (!s.finished_message.empty()) {
    sum.already_finished = true;
    sum.message = s.finished_message;
    sum.steps = s.start_step;
    if (auto latest = find_latest_checkpoint(s.out_dir / "checkpoints")) sum.checkpoint_path = latest->string();
    return sum;
  }
  sum.vocab_size = s.tokenizer->vocab_size();
  sum.num_parameters = s.runner->num_parameters();
  {
    // This rank's estimate with the vocabulary now known, to set beside the measured peak.
    const auto ranks = estimate_training_memory_per_rank(s.cfg, sum.vocab_size);
    const size_t r = size_t(s.runner->rank());
    sum.estimated_peak_bytes = int64_t(ranks.at(std::min(r, ranks.size() - 1)).total());
  }
  sum.unigram_entropy = unigram_entropy(s.train_tokens, sum.vocab_size);
  sum.metrics_path = (s.out_dir / "metrics.jsonl").string();
  sum.plot_path = (s.out_dir / "loss.svg").string();
  const bool main_rank = s.runner->rank() == 0;  // only rank 0 writes metrics and plots
  if (main_rank && s.start_step > 0) truncate_metrics(sum.metrics_path, s.start_step);
  std::unique_ptr<MetricsWriter> metrics;
  if (main_rank) metrics = std::make_unique<MetricsWriter>(sum.metrics_path, s.start_step > 0);
  const std::optional<PeakFlops> peak = device_peak_flops(s.device);
  const int64_t devices = s.job ? s.job->env.world_size : 1;
  Progress progress({.total_steps = cfg.train.steps, .log_interval = cfg.train.log_interval,
                     .interactive = s.options.interactive, .first_step = s.start_step,
                     .flops_per_token = model_flops_per_token(sum.num_parameters, cfg.model.n_layer, cfg.model.d_model, T),
                     .peak_flops = peak ? peak->flops * double(devices) : 0.0});
  log_line(s.options, str_cat("model: GPT d_model=", cfg.model.d_model, " n_layer=", cfg.model.n_layer,
                              " n_head=", cfg.model.n_head, " block_size=", T, " vocab=", sum.vocab_size, ", ",
                              sum.num_parameters, " parameters; layout: ", s.runner->describe_layout(), ", ", s.device.str(), ", precision ",
                              precision_description(cfg), ", ",
                              cpu::num_threads(), " CPU threads", s.job ? " per process" : ""));
  if (cfg.train.mode == "static") {
    log_line(s.options, "mode: static (docs/STATIC_GRAPH.md): the first step runs eagerly, the second is traced into "
                        "a graph, later steps replay it; evaluation runs eagerly");
    if (cfg.parallel.pp > 1)
      log_line(s.options, "mode: static with a pipeline: each stage traces its part of the schedule (forwards, backwards, "
                          "its sends and receives) with the optimizer step, and replays it in the schedule's order");
  }
  log_line(s.options, peak ? str_cat("MFU: of ", devices, " x ", peak->device_name, " at ", peak->flops / 1e12, " TFLOP/s (bf16 dense peak)")
                           : str_cat("MFU: not shown (the peak FLOP/s of ", s.device.str(), " is not known)"));

  reset_peak_memory(s.device);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  // What an evaluation's log line compares the validation with: a classifier's accuracy against
  // always predicting the majority label, a language model's loss against the unigram entropy.
  auto baseline = [&](const StepMetrics& m) {
    return s.classes ? str_cat("val_accuracy ", *m.val_accuracy, ", val_macro_f1 ", *m.val_macro_f1,
                               ", majority baseline ", *m.majority_accuracy)
                     : str_cat("unigram baseline ", sum.unigram_entropy);
  };
  if (s.classes) sum.labels = s.classes->labels, sum.majority_accuracy = s.classes->majority_accuracy;
  sum.initial_val_loss = NAN;
  if (s.start_step == 0 && cfg.train.eval_interval > 0) {
    StepMetrics m;
    sum.initial_val_loss = evaluate(s, val_loader, &m);
    if (!s.options.quiet) progress.note(str_cat("step 0: val_loss ", sum.initial_val_loss, " (", baseline(m), ")"));
  }
  const int64_t last_step = s.options.stop_after > 0 ? std::min(s.options.stop_after, cfg.train.steps) : cfg.train.steps;
  int64_t step = s.start_step;
  for (; step < last_step; ++step) {
    const double lr = s.schedule->lr(step);
    s.runner->set_lr(lr);
    const auto step_t0 = std::chrono::steady_clock::now();
    const StepResult r = s.runner->train_step(step, train_loader);
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count();
    const double grad_norm = r.grad_norm;
    const double loss_v = r.loss;
    TRIREME_CHECK(std::isfinite(loss_v), "training diverged: the loss is ", loss_v, " at step ", step + 1,
                  " (try a lower optim.lr or set optim.grad_clip)");
    sum.losses.push_back(loss_v);
    if (sum.losses.size() == 1) sum.first_loss = loss_v;
    sum.final_loss = loss_v;
    const int64_t done = step + 1;
    StepMetrics m;
    m.step = done;
    m.loss = loss_v;
    m.lr = lr;
    m.grad_norm = grad_norm;
    m.elapsed_s = elapsed();
    m.tokens_per_s = double((done - s.start_step) * B * T) / std::max(m.elapsed_s, 1e-9);
    m.peak_memory_bytes = memory_stats(s.device).peak_bytes;
    sum.peak_memory_bytes = std::max(sum.peak_memory_bytes, m.peak_memory_bytes);
    m.loss_scale = r.loss_scale;
    m.skipped_steps = r.skipped_steps;
    m.graph_traces = r.graph_traces;
    const bool eval_now = (cfg.train.eval_interval > 0 && done % cfg.train.eval_interval == 0) || done == cfg.train.steps;
    if (eval_now) {
      m.val_loss = evaluate(s, val_loader, &m);
      s.best_val_loss = std::min(s.best_val_loss, *m.val_loss);
      sum.final_val_loss = *m.val_loss;
      if (m.val_accuracy) sum.val_accuracy = *m.val_accuracy, sum.val_macro_f1 = *m.val_macro_f1;
      if (!s.options.quiet) {
        progress.note(str_cat("step ", done, ": val_loss ", *m.val_loss, " (best ", s.best_val_loss, ", ", baseline(m), ")"));
      }
    }
    if (metrics) metrics->write(m);
    if (!s.options.quiet) {
      progress.update({.step = done, .loss = loss_v, .lr = lr, .tokens = B * T, .step_s = step_s, .elapsed_s = m.elapsed_s});
    }
    if ((cfg.train.checkpoint_interval > 0 && done % cfg.train.checkpoint_interval == 0) || done == last_step) {
      save(s, done, progress);
    }
  }
  if (!s.options.quiet) progress.finish();
  sum.steps = step;
  sum.seconds = elapsed();
  sum.tokens = (step - s.start_step) * B * T;
  sum.tokens_per_s = double(sum.tokens) / std::max(sum.seconds, 1e-9);
  sum.best_val_loss = s.best_val_loss;
  if (auto latest = find_latest_checkpoint(s.out_dir / "checkpoints")) sum.checkpoint_path = latest->string();
  metrics.reset();
  if (main_rank && fs::exists(sum.metrics_path) && fs::file_size(sum.metrics_path) > 0) {
    plot_metrics_file(sum.metrics_path, sum.plot_path);
  }
  return sum;
}

}  // namespace trireme::train
