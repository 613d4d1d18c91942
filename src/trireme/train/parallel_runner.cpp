// The trainer's parallel runners (see parallel_runner.h).
#include "trireme/train/parallel_runner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora.h"
#include "trireme/cuda/device.h"
#include "trireme/graph/static_function.h"
#include "trireme/ops/step_scalar.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/parallel/optimizer_reshard.h"
#include "trireme/parallel/pipeline_executor.h"
#include "trireme/parallel/replica_check.h"
#include "trireme/parallel/zero.h"
#include "trireme/train/lora_adapters.h"

namespace trireme::train {

using namespace std::chrono_literals;

parallel::ParallelLayout parallel_layout(const io::ParallelConfig& p) {
  return {.dp = int(p.dp),
          .tp = int(p.tp),
          .pp = int(p.pp),
          .micro_batches = int(p.micro_batches),
          .schedule = p.schedule,
          .virtual_stages = int(p.virtual_stages),
          .zero = int(p.zero),
          .bucket_bytes = std::max<int64_t>(1, int64_t(p.bucket_mb * double(1 << 20))),
          .sequence_parallel = p.sequence_parallel};
}

std::shared_ptr<ParallelJob> ParallelJob::connect(const io::ParallelConfig& config, const dist::DistEnv& env,
                                                  DeviceType device) {
  const int64_t need = config.world_size();
  if (env.world_size != need) {
    throw io::ConfigError(str_cat(
        "parallel: the layout ", config.describe(), " needs dp x tp x pp = ", need, " process", need == 1 ? "" : "es",
        ", but WORLD_SIZE is ", env.world_size, " (from ", env.source, "); ",
        env.world_size == 1
            ? str_cat("run `trireme train --nproc ", need, " ...` (or `trireme launch --nproc-per-node ", need,
                      " -- trireme train ...`)")
            : str_cat(dist::how_to_start(env, need), ", or change [parallel] so that ",
                      "dp x tp x pp = ", env.world_size,
                      env.world_size % (config.tp * config.pp) == 0
                          ? str_cat(" (here: --set parallel.dp=", env.world_size / (config.tp * config.pp), ")")
                          : std::string())));
  }
  auto job = std::make_shared<ParallelJob>();
  job->env = env;
  const bool on_gpu = device == DeviceType::cuda;
  if (on_gpu) {
    TRIREME_CHECK(cuda::is_available(), "parallel: the device is cuda, but ", cuda::unavailable_reason());
    TRIREME_CHECK(env.local_rank < cuda::device_count(), "parallel: local rank ", env.local_rank, " needs GPU ",
                  env.local_rank, ", but this node has ", cuda::device_count(), " (start at most ",
                  cuda::device_count(), " processes per node)");
#ifdef TRIREME_WITH_CUDA
    cuda::set_device(env.local_rank);  // before the communicator or any tensor touches a GPU
#endif
  }
  job->device = on_gpu ? Device::cuda(env.local_rank) : Device::cpu();
  job->store_server = dist::host_store_if_needed(env);  // under srun rank 0 hosts it (dist/env.h)
  job->store = std::make_shared<dist::StoreClient>(dist::store_client_options(env, 60s));
  job->world = dist::make_process_group(on_gpu ? "nccl" : "gloo", job->store, env.rank, env.world_size,
                                        {.timeout = 300s,
                                         .device = on_gpu ? env.local_rank : -1,
                                         .peer_all_reduce = dist::parse_peer_all_reduce_mode(config.peer_allreduce)});
  job->ctx = std::make_unique<parallel::ParallelContext>(job->world, parallel_layout(config));
  return job;
}

namespace {

nlohmann::json layout_json_of(const io::ParallelConfig& p) {
  nlohmann::json j = {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp},
                      {"virtual_stages", p.schedule == "interleaved" ? p.virtual_stages : 1},
                      {"zero", p.zero}, {"sequence_parallel", p.sequence_parallel}};
  if (p.zero > 0) j["bucket_mb"] = p.bucket_mb;  // ZeRO's shards follow the buckets
  return j;
}

// x averaged over `group` (a double, as f64 so the mean of the losses does not round to f32).
// NCCL groups reduce on the GPU: the value goes there and back (`device`: the job's).
double mean_over(dist::ProcessGroup* group, double x, Device device) {
  if (!group || group->size() == 1) return x;
  Tensor t = full({1}, x, DType::f64, device);
  group->all_reduce(t, {.op = dist::ReduceOp::avg})->wait();
  return to_device(t, Device::cpu()).item();
}

std::map<std::string, Tensor> as_map(const NamedTensors& v) { return {v.begin(), v.end()}; }

// Every layout's runner: this rank's part of the model (models::GPT of the layout), the
// forward and backward of a step (gradient accumulation over micro-batches with one stage, the
// PipelineExecutor's schedule with several), the gradients made whole over dp (the Reducer) and
// tp (the deferred sums), then one global norm and the optimizer (AdamW, SGD or ZeRO-1's).
class ParallelRunner : public StepRunner {
 public:
  ParallelRunner(const io::TrainConfig& cfg, int64_t vocab, std::shared_ptr<ParallelJob> job, int64_t num_classes)
      : cfg_(cfg), vocab_(vocab), num_classes_(num_classes), job_(std::move(job)) {
    const auto& L = ctx().layout();
    model_ = std::make_shared<models::GPT>(gpt_config(cfg, vocab, num_classes), ctx(), uint64_t(cfg.train.seed));
    if (cfg.lora.rank > 0) {
      model_->add_lora({.rank = cfg.lora.rank, .alpha = cfg.lora.alpha, .dropout = cfg.lora.dropout,
                        .seed = uint64_t(cfg.train.seed)},
                       cfg.lora.targets);
    }
    // On the device before the executor (its buffers follow the parameters), the Reducer and
    // the optimizers: their buckets and state live there.
    if (!job_->device.is_cpu()) model_->to(job_->device);
    model_->set_recompute(cfg.memory.recompute == "full"        ? models::GPT::Recompute::full
                          : cfg.memory.recompute == "selective" ? models::GPT::Recompute::selective
                                                                : models::GPT::Recompute::none,
                          cfg.memory.recompute_layers);
    if (L.pp > 1) {
      pipe_ = std::make_unique<parallel::PipelineExecutor>(model_, ctx());
    } else {
      // One sum of the partial gradients after the backward rather than one per layer inside it
      // (Note [deferred gradient sums]); ZeRO shards the gradients as they arrive, so not there.
      model_->defer_grad_sums(L.zero == 0);
    }
    // With one stage the Reducer reduces during the last micro-batch's backward; a pipeline's
    // backwards are interleaved with its transfers, so it reduces what they accumulated after
    // the step (Note [ZeRO inside a pipeline]).
    // One process (no world) has nothing to reduce.
    // ZeRO-3 gives each block a bucket of its own, the layout of its sharded parameters; those
    // have no replicas to check (each rank holds its own chunk), the rest of the model has.
    const NamedTensors params = trainable();  // LoRA: the adapters alone are reduced and stepped
    const auto units = L.zero == 3 ? models::block_parameter_indices(*model_, params) : std::vector<std::vector<size_t>>{};
    std::vector<char> in_unit(params.size(), 0);
    for (const auto& unit : units)
      for (size_t i : unit) in_unit[i] = 1;
    for (size_t i = 0; i < params.size(); ++i)
      if (!in_unit[i]) replicated_.push_back(params[i]);
    if (job_->world) {
      reducer_ = std::make_unique<parallel::Reducer>(
          params, ctx().dp_group(), parallel::ReducerOptions{.bucket_bytes = L.bucket_bytes, .zero = L.zero, .units = units});
    }
    if (L.zero == 3) sharded_ = models::shard_blocks(*model_, *reducer_);
    if (L.zero > 0) {
      optimizer_ = std::make_unique<parallel::ZeroOptimizer>(
          *reducer_,
          optim::AdamWOptions{.lr = cfg.optim.lr, .betas = {cfg.optim.beta1, cfg.optim.beta2}, .eps = cfg.optim.eps,
                              .weight_decay = cfg.optim.weight_decay},
          sharded_.get());
    } else {
      optimizer_ = make_optimizer(cfg, params);
    }
  }

  int rank() const override { return job_->ctx->world_rank(); }
  Device device() const override { return job_->device; }
  std::string describe_layout() const override {
    const auto& p = cfg_.parallel;
    const auto& mem = cfg_.memory;
    const std::string recompute =
        mem.recompute == "none" ? ""
                                : str_cat(", recompute ", mem.recompute,
                                          mem.recompute_layers >= 0 ? str_cat(" (first ", mem.recompute_layers, " blocks)") : "");
    const std::string lora =
        cfg_.lora.rank > 0 ? str_cat(", LoRA rank ", cfg_.lora.rank, " (", trainable_count(), " trainable parameters here)") : "";
    if (!job_->world) {
      return str_cat("1 process (dp=1 tp=1 pp=1", p.micro_batches > 1 ? str_cat(", micro_batches=", p.micro_batches) : "",
                     recompute, lora, ")");
    }
    std::string extra = str_cat(", micro_batches=", p.micro_batches, recompute);
    if (p.pp > 1) extra += str_cat(", schedule ", p.schedule, p.schedule == "interleaved" ? str_cat(" x", p.virtual_stages) : "");
    if (p.zero > 0) extra += str_cat(", ZeRO-", p.zero);
    if (p.sequence_parallel) extra += ", sequence parallel";
    extra += lora;
    return str_cat(job_->ctx->world_size(), " processes (", p.describe(), extra, "); this is ", job_->ctx->describe());
  }
  nlohmann::json layout_json() const override { return layout_json_of(cfg_.parallel); }
  void barrier() override {
    if (job_->world) job_->world->barrier({.timeout = std::chrono::hours(1)})->wait();
  }

  int64_t num_parameters() override {
    // Whole parameters, each once: a tp shard counts as its full (unpadded) shape, stages are
    // summed over pp, and the last stage leaves the tied head weight to stage 0.
    const std::set<std::string> elsewhere = second_tied_copy();
    double n = 0;
    for (const auto& [name, p] : model_->named_parameters()) {
      if (elsewhere.count(name)) continue;
      auto it = model_->shard_specs().find(name);
      if (it == model_->shard_specs().end()) {
        n += double(p.numel());
      } else {
        double full = 1;
        for (int64_t s : it->second.full_shape) full *= double(s);
        n += full;
      }
    }
    if (ctx().layout().pp == 1) return int64_t(n);
    Tensor t = full({1}, n, DType::f64, job_->device);
    ctx().pp_group()->all_reduce(t)->wait();
    return int64_t(std::llround(host_value(t)));
  }

  void set_lr(double lr) override { optimizer_->set_lr(lr); }

  StepResult train_step(int64_t step, const io::DataLoader& train) override {
    model_->set_rng(uint64_t(cfg_.train.seed), uint64_t(step));
    io::Batch b = local_batch_of(train, step);
    // Packed sequences (SFT): each micro-batch's mean over its counted targets is weighted by its
    // share of the global batch's, so the step's loss is the mean over all of them, in every layout.
    const int64_t counted = train.packed() ? train.counted_targets(step * cfg_.train.batch_size, cfg_.train.batch_size) : 0;
    if (cfg_.train.mode == "static") return static_step(step, b, train.packed(), counted);
    StepResult r{.loss = mean_over(ctx().dp_group(), pipe_ ? pipeline_step(b, counted) : accumulated_step(b, counted),
                                   job_->device),
                 .grad_norm = NAN};
    // The gradients whole: averaged over dp (ZeRO: this rank's shard of them), summed over tp.
    if (pipe_) {
      reducer_->reduce_accumulated();
    } else {
      if (reducer_) reducer_->finish();
      model_->sum_deferred_grads();  // after the dp average: both sums are linear
    }
    auto pieces =
        parallel::optimizer_grad_pieces(*optimizer_, trainable(), model_->shard_specs(), second_tied_copy());
    std::vector<Tensor> grads;
    for (const auto& piece : pieces) grads.push_back(piece.grad);
    if (unscale_and_check(grads)) {  // every rank the same answer
      r.grad_norm = cfg_.optim.grad_clip > 0 ? parallel::clip_global_grad_norm(pieces, cfg_.optim.grad_clip, ctx())
                                             : parallel::global_grad_norm(pieces, ctx());
      optimizer_->step();
    }
    // With a Reducer the gradients stay views of its buckets, zeroed in place: the next backward
    // accumulates into them directly (a pipeline's micro-batches too), with no second copy.
    optimizer_->zero_grad(/*set_to_none=*/reducer_ == nullptr);
    if (precision_.has_scaler()) r.loss_scale = precision_.loss_scale(), r.skipped_steps = precision_.skipped_steps();
    check_replicas(step);
    return r;
  }

  // The loss of forward_stages' output, sent from the last stage to the others.
  double eval_loss(const io::DataLoader& val, int64_t batches) override {
    NoGradGuard no_grad;
    auto autocast = precision_.autocast_guard(job_->device);
    model_->eval();
    dist::ProcessGroup* pp = ctx().pp_group();
    const int p = ctx().layout().pp, S = p * model_->pipeline().virtual_stages;
    double total = 0;
    for (int64_t i = 0; i < batches; ++i) {
      io::Batch b = local_batch_of(val, i);
      double loss = 0;
      if (Tensor out = forward_stages(b.inputs); out.defined()) {
        loss = host_value(model_->loss_of(out, b.targets));
        if (val.packed()) {  // weighted by the batch's share of the counted targets (see train_step)
          const int64_t all = val.counted_targets(i * cfg_.train.batch_size, cfg_.train.batch_size);
          loss = all > 0 ? loss * double(counted_targets(b.targets)) * double(ctx().layout().dp) / double(all) : 0.0;
        }
      }
      if (p > 1) {
        Tensor l = full({1}, loss, DType::f64, job_->device);  // NCCL groups take GPU tensors only
        pp->broadcast(l, {.root = (S - 1) % p})->wait();
        loss = host_value(l);
      }
      total += loss;
    }
    model_->train();
    return mean_over(ctx().dp_group(), total / double(batches), job_->device);
  }

  Tensor eval_class_logits(const io::DataLoader& val, int64_t batches) override {
    TRIREME_CHECK(num_classes_ > 0, "eval_class_logits: this run's model is a language model, not a classifier");
    NoGradGuard no_grad;
    auto autocast = precision_.autocast_guard(job_->device);
    model_->eval();
    const int64_t B = cfg_.train.batch_size, C = num_classes_, mine = local_batch();
    // Every rank's rows in place, zeros elsewhere: the sum over dp and the broadcast from the last
    // stage then give every rank all of them.
    Tensor all = zeros({batches * B, C}, DType::f32);
    float* dst = all.data<float>();
    for (int64_t i = 0; i < batches; ++i) {
      io::Batch b = local_batch_of(val, i);
      Tensor out = forward_stages(b.inputs);
      if (!out.defined()) continue;
      const int64_t T = out.size(1);
      const std::vector<float> logits =
          contiguous(to_device(to_dtype(out, DType::f32), Device::cpu())).to_vector<float>();
      const std::vector<int64_t> targets = contiguous(to_device(b.targets, Device::cpu())).to_vector<int64_t>();
      for (int64_t row = 0; row < mine; ++row) {
        int64_t at = 0;
        while (at < T && targets[size_t(row * T + at)] == -100) ++at;
        TRIREME_CHECK(at < T, "eval_class_logits: sample ", i * B + first_global_row() + row,
                      " has no counted target to classify at");
        std::copy_n(logits.data() + (row * T + at) * C, C, dst + (i * B + first_global_row() + row) * C);
      }
    }
    model_->train();
    if (job_->world) {
      Tensor on_device = to_device(all, job_->device);  // NCCL groups take GPU tensors only
      if (ctx().layout().dp > 1) ctx().dp_group()->all_reduce(on_device)->wait();
      const int p = ctx().layout().pp, last_stage = (p * model_->pipeline().virtual_stages - 1) % p;
      if (p > 1) ctx().pp_group()->broadcast(on_device, {.root = last_stage})->wait();
      all = to_device(on_device, Device::cpu());
    }
    return all;
  }

  std::filesystem::path save(const std::filesystem::path& root, Checkpoint ckpt) override {
    // The first replica writes the model, whole: each stage gathers its tp shards and its tp rank
    // 0 writes them; rank 0 merges the stages' parts, the tied weight from stage 0 (Note
    // [pipeline tied embeddings]). Every rank writes its optimizer state.
    WholeParameters whole_now(sharded_.get());
    if (ctx().dp_rank() == 0) {
      NamedTensors whole = model_->full_state_dict();  // collective over tp
      if (ctx().tp_rank() == 0) ckpt.model = std::move(whole);
    }
    ckpt.optimizer = optimizer_->state_dict();
    precision_.add_state(ckpt.optimizer);
    const NamedTensors adapters = models::lora_tensors(ckpt.model);  // whole: this rank's part of the model file
    const std::filesystem::path dir =
        job_->world ? save_checkpoint_distributed(root, ckpt, *job_->world) : save_checkpoint(root, ckpt);
    if (cfg_.lora.rank > 0) save_all_adapters(dir, adapters);
    return dir;
  }

  void load_model(const std::map<std::string, Tensor>& given, const std::string& source) override {
    // A base model for a LoRA run has no adapters, nor one for a classifier its head: they keep
    // their initial values.
    std::map<std::string, Tensor> full = given;
    if (model_->classifier && !given.count("classifier.weight")) {
      for (auto& [name, t] : model_->classifier->named_parameters()) full["classifier." + name] = t.detach();
    }
    if (model_->has_lora() && models::lora_tensors({given.begin(), given.end()}).empty()) {
      WholeParameters whole_now(sharded_.get());
      for (auto& [name, t] : models::lora_tensors(model_->full_state_dict())) full[name] = t;  // collective over tp
    }
    for (const auto& [name, p] : model_->named_parameters()) {
      auto it = full.find(name);
      TRIREME_CHECK(it != full.end(), source, " has no '", name, "', which this run's model has");
      auto spec = model_->shard_specs().find(name);
      const Shape want = spec == model_->shard_specs().end() ? p.sizes() : spec->second.full_shape;
      TRIREME_CHECK(it->second.sizes() == want, source, ": '", name, "' is ", it->second.sizes(), " there but ", want,
                    " in this run's model");
    }
    WholeParameters whole_now(sharded_.get());
    model_->load_full_state_dict(full);  // each tp rank its slices
    if (sharded_) sharded_->keep_gathered_values();
  }

  void load(const std::filesystem::path& dir, const Checkpoint& ckpt) override {
    load_model(as_map(ckpt.model), str_cat("checkpoint '", dir.string(), "'"));
    // This rank's optimizer file when the checkpoint has this run's layout (bit-identical
    // resume), else its part of the whole state reassembled from every rank's file (Note
    // [resuming in another layout]).
    if (!optimizer_layout_differs(ckpt, layout_json())) {
      // A one-process checkpoint carries its optimizer state in ckpt; a parallel one, a file per rank.
      NamedTensors own = ckpt.optimizer.empty() ? load_checkpoint_optimizer(dir, rank()) : ckpt.optimizer;
      optimizer_->load_state_dict(precision_.take_state(as_map(own)));
      return;
    }
    auto whole = precision_.take_state(load_whole_optimizer_state(dir, ckpt, gpt_config(cfg_, vocab_, num_classes_)));
    optimizer_->load_unsharded_state_dict(
        parallel::shard_optimizer_state(whole, model_->named_parameters(), model_->shard_specs()));
  }

 private:
  static constexpr int kEvalTag = 1 << 20;  // far from the executor's tags

  const parallel::ParallelContext& ctx() const { return *job_->ctx; }

  // The forward of `inputs` without the loss, one virtual stage after another: stage s runs on
  // pipeline rank s mod p (its chunk s / p), receiving its input from stage s - 1 and sending its
  // output to stage s + 1. Returns the last stage's output on the rank that holds it (every rank
  // with one stage), undefined elsewhere.
  Tensor forward_stages(const Tensor& inputs) {
    dist::ProcessGroup* pp = ctx().pp_group();
    const int p = ctx().layout().pp, r = ctx().pp_rank(), S = p * model_->pipeline().virtual_stages;
    const int64_t rows = inputs.size(0), T = inputs.size(1);
    std::vector<dist::WorkPtr> sends;
    std::vector<Tensor> keep;  // the sent activations stay alive until their sends finish
    Tensor last;
    for (int s = 0; s < S; ++s) {
      if (s % p != r) continue;
      Tensor input = inputs;
      if (s > 0) {
        input = Tensor::empty({rows, T, model_->hidden_size()}, model_->activation_dtype(), job_->device);
        // Started alone, like the executor's (Note [pipeline transfers start alone]).
        pp->recv(input, (s - 1) % p, {.tag = kEvalTag + s, .alone = true})->wait();
      }
      Tensor out = model_->forward_chunk(s / p, input);
      if (s == S - 1) {
        last = out;
      } else {
        keep.push_back(contiguous(out));
        sends.push_back(pp->send(keep.back(), (s + 1) % p, {.tag = kEvalTag + s + 1, .alone = true}));
      }
    }
    for (auto& w : sends) w->wait();
    return last;
  }
  int64_t local_batch() const { return cfg_.train.batch_size / ctx().layout().dp; }
  // The row of the step's global batch where this dp rank's slice starts (Note [global sample
  // order]): what dropout keys its masks by (Note [dropout keyed by global sample]).
  int64_t first_global_row() const { return int64_t(ctx().dp_rank()) * local_batch(); }
  // This rank's part of batch `index` of `loader`, on the job's device.
  io::Batch local_batch_of(const io::DataLoader& loader, int64_t index) const {
    io::Batch b = loader.batch(index, cfg_.train.batch_size, ctx().dp_rank(), ctx().layout().dp);
    if (!job_->device.is_cpu()) {
      b.inputs = to_device(b.inputs, job_->device), b.targets = to_device(b.targets, job_->device);
    }
    return b;
  }

  // One stage: the micro-batches' forwards and backwards one after another, accumulating into
  // the gradients; the Reducer reduces during the last backward. Returns this rank's mean loss.
  // global_counted > 0 (packed sequences): the targets that count in the whole global batch, by
  // which each micro-batch's loss is weighted (see train_step).
  double accumulated_step(const io::Batch& b, int64_t global_counted = 0) {
    double loss_sum = 0;
    for (const Tensor& loss : micro_batch_losses(b, global_counted)) loss_sum += host_value(loss);
    return loss_sum;
  }

  // The forwards and backwards of accumulated_step; each micro-batch's loss (its share of the
  // batch's mean), detached.
  std::vector<Tensor> micro_batch_losses(const io::Batch& b, int64_t global_counted = 0) {
    const int m = ctx().layout().micro_batches;
    const int64_t rows = local_batch() / m;
    // Note [autocast cast cache]: the micro-batches share one cast of each weight (the optimizer
    // changes none before they end) rather than casting it again each. Not under ZeRO-3, which
    // gathers a block's parameters for each use so as not to hold them in between.
    std::optional<autograd::CastCache> casts;
    if (m > 1 && precision_.autocast() && ctx().layout().zero < 3) casts.emplace(model_->parameters());
    std::vector<Tensor> losses;
    for (int i = 0; i < m; ++i) {
      Tensor x = m == 1 ? b.inputs : contiguous(narrow(b.inputs, 0, i * rows, rows));
      Tensor y = m == 1 ? b.targets : contiguous(narrow(b.targets, 0, i * rows, rows));
      if (reducer_) reducer_->prepare_backward(/*sync=*/i == m - 1);  // reduce once, during the last backward
      Tensor loss;
      {
        nn::GlobalRowScope global_rows(first_global_row() + i * rows);
        auto autocast = precision_.autocast_guard(job_->device);
        loss = model_->loss(x, y);
      }
      if (!static_weights_.empty()) {  // static, packed: the weight is an argument of the graph
        loss = mul_step_scalar(loss, [this, i] { return static_weights_[size_t(i)]; });
      } else if (global_counted > 0) {
        loss = loss * micro_batch_weight(y, global_counted);
      }
      if (m > 1) loss = loss / double(m);  // the micro-batches' mean losses add up to the batch's
      precision_.scale_loss(loss).backward();
      losses.push_back(loss.detach());
    }
    return losses;
  }

  // train.mode = "static": the step of train_step with nothing read on the host inside it, so
  // that it can be traced (docs/STATIC_GRAPH.md).
  // Returns {the gradient norm, each micro-batch's loss}.
  // in_graph: f16's step is masked by the inf/NaN flag on the device (the step of a traced
  // graph) rather than skipped on the host (an eager step of static mode; see static_step).
  std::vector<Tensor> device_step(const io::Batch& b, bool in_graph = true) {
    std::vector<Tensor> out = micro_batch_losses(b);
    out.insert(out.begin(), reduce_clip_and_update(in_graph));
    return out;
  }

  // What follows the forwards and backwards of a step, with nothing read on the host: the
  // gradients whole (as train_step), the global norm and clipping on the device, the optimizer
  // step and the gradients zeroed. Returns the norm. The end of both static steps (device_step,
  // pipeline_device_step).
  Tensor reduce_clip_and_update(bool in_graph = true) {
    if (pipe_) {
      reducer_->reduce_accumulated();  // its all-reduces are nodes of the graph (dist/recorded_collective.h)
    } else {
      if (reducer_) reducer_->finish();
      model_->sum_deferred_grads();
    }
    auto pieces =
        parallel::optimizer_grad_pieces(*optimizer_, trainable(), model_->shard_specs(), second_tied_copy());
    if (precision_.has_scaler()) {  // f16: unscaled; the step skipped (masked) on overflow, as train_step
      std::vector<Tensor> grads;
      for (const auto& piece : pieces) grads.push_back(piece.grad);
      if (!in_graph && !unscale_and_check(grads)) {
        optimizer_->zero_grad(/*set_to_none=*/reducer_ == nullptr);
        return full({1}, NAN, DType::f32, job_->device);  // no norm, as train_step
      }
      if (in_graph) optimizer_->mask_steps_by(unscale(grads));  // static_step reads the flag after
    }
    Tensor norm = parallel::clip_global_grad_norm_on_device(pieces, cfg_.optim.grad_clip, ctx());
    optimizer_->step();
    optimizer_->mask_steps_by(Tensor());
    optimizer_->zero_grad(/*set_to_none=*/reducer_ == nullptr);  // as train_step
    return norm;
  }

  // device_step as a function of the traced inputs {inputs, targets}.
  std::vector<Tensor> device_step_of(const std::vector<Tensor>& in) { return device_step({.inputs = in[0], .targets = in[1]}); }

  graph::TraceResult trace_step(const io::Batch& b) override {
    TRIREME_CHECK(cfg_.train.mode == "static", "trace_step: train.mode is \"", cfg_.train.mode, "\", not \"static\"");
    TRIREME_CHECK(!pipe_, "trace_step: traces one process's step; trace a pipeline's computation with parallel.pp = 1");
    device_step(b, /*in_graph=*/false);
    return graph::trace([this](const std::vector<Tensor>& in) { return device_step_of(in); }, {b.inputs, b.targets});
  }

  // The first step runs eagerly (it creates the optimizer's state, which must exist before a
  // trace), the second is traced (it runs eagerly while recording), later ones replay the graph;
  // a batch of another shape traces another graph.
  // packed: the batch's micro-batches are weighted (see train_step); global_counted as there.
  // f16: steps run eagerly until the optimizer has stepped once (overflowing first steps create no
  // optimizer state); in the graph the step is masked by the device's inf/NaN flag, read here after
  // the replay to update the loss scale.
  StepResult static_step(int64_t step, const io::Batch& b, bool packed, int64_t global_counted) {
    static_weights_ = packed ? micro_batch_weights(b.targets, global_counted) : std::vector<double>{};
    if (pipe_) {
      pipe_->set_micro_batch_weights(static_weights_);  // read by the replay
      return static_pipeline_step(step, b);
    }
    std::vector<Tensor> out;
    const bool in_graph = static_graph_ && optimizer_->step_count() > 0;
    if (!in_graph) {
      out = device_step(b, /*in_graph=*/false);
      if (!static_graph_) {
        static_graph_ = std::make_unique<graph::StaticFunction>(
            [this](const std::vector<Tensor>& in) { return device_step_of(in); });
      }
    } else {
      out = (*static_graph_)({b.inputs, b.targets});
    }
    StepResult r{.grad_norm = host_value(out[0])};
    after_static_step(in_graph, r);
    double loss_sum = 0;
    for (size_t i = 1; i < out.size(); ++i) loss_sum += host_value(out[i]);
    r.loss = mean_over(ctx().dp_group(), loss_sum, job_->device);
    r.graph_traces = static_graph_->traces();
    check_replicas(step);
    return r;
  }

  // f16, after a static step: the flag the graph left on the device read, the scale updated; a
  // step the graph masked does not count and has no gradient norm, as an eager skipped step.
  void after_static_step(bool in_graph, StepResult& r) {
    if (!precision_.has_scaler()) return;
    if (in_graph && !precision_.update()) {
      optimizer_->uncount_step();
      r.grad_norm = NAN;
    }
    r.loss_scale = precision_.loss_scale(), r.skipped_steps = precision_.skipped_steps();
  }

  // train.mode = "static" with a pipeline: the whole step of train_step with nothing read on the
  // host: the executor's schedule (forwards, backwards, its sends and receives recorded as
  // transfers that a replay issues and waits for where the schedule does, the tied weight's sum)
  // and reduce_clip_and_update. Returns {the gradient norm, the sum of the micro-batches' losses
  // (0 but on the last stage)}.
  std::vector<Tensor> pipeline_device_step(const std::vector<Tensor>& in, bool in_graph = true) {
    auto autocast = precision_.autocast_guard(job_->device);  // as pipeline_step
    Tensor loss_sum = pipe_->run_schedule(in[0], in[1], first_global_row());
    return {reduce_clip_and_update(in_graph), loss_sum};
  }

  // The first step runs eagerly (it creates AdamW's state), the second is traced, later ones
  // replay; the loss goes from the last stage to the others after the graph. f16: as static_step.
  StepResult static_pipeline_step(int64_t step, const io::Batch& b) {
    std::vector<Tensor> out;
    pipe_->set_loss_scale(precision_.has_scaler() ? precision_.loss_scale() : 1.0);  // read by every replay
    const bool in_graph = static_graph_ && optimizer_->step_count() > 0;
    if (!in_graph) {
      out = pipeline_device_step({b.inputs, b.targets}, /*in_graph=*/false);
      if (!static_graph_) {
        static_graph_ = std::make_unique<graph::StaticFunction>(
            [this](const std::vector<Tensor>& in) { return pipeline_device_step(in); });
      }
    } else {
      out = (*static_graph_)({b.inputs, b.targets});
    }
    StepResult r{.loss = mean_over(ctx().dp_group(), pipe_->mean_loss(out[1]), job_->device),
                 .grad_norm = host_value(out[0])};
    after_static_step(in_graph, r);
    r.graph_traces = static_graph_->traces();
    check_replicas(step);
    return r;
  }

  // Several stages: the executor's schedule (its micro-batches, transfers and the tied weight's
  // sum). Returns the batch's mean loss. global_counted > 0: packed sequences, each micro-batch
  // weighted as in micro_batch_losses.
  double pipeline_step(const io::Batch& b, int64_t global_counted = 0) {
    // The executor's forwards run under autocast; backward ignores it (autograd/engine.cpp).
    auto autocast = precision_.autocast_guard(job_->device);
    pipe_->set_loss_scale(precision_.has_scaler() ? precision_.loss_scale() : 1.0);
    pipe_->set_micro_batch_weights(global_counted > 0 ? micro_batch_weights(b.targets, global_counted)
                                                      : std::vector<double>{});
    return pipe_->step(b.inputs, b.targets, first_global_row());
  }

  // Packed sequences: the factor on a micro-batch's mean loss (targets y) that makes the step's
  // loss the mean over the global batch's counted targets (global_counted of them), given that
  // the micro-batches' losses are averaged over m and then over dp.
  double micro_batch_weight(const Tensor& y, int64_t global_counted) const {
    return double(counted_targets(y)) * double(ctx().layout().micro_batches * ctx().layout().dp) /
           double(global_counted);
  }

  // micro_batch_weight of each micro-batch of `targets` (this rank's batch), for a traced step:
  // computed on the host before each replay. A global batch with no counted target gets weights
  // of 1, which leave the loss as eager leaves it (unweighted).
  std::vector<double> micro_batch_weights(const Tensor& targets, int64_t global_counted) const {
    const int m = ctx().layout().micro_batches;
    const int64_t rows = local_batch() / m;
    std::vector<double> w(size_t(m), 1.0);
    if (global_counted > 0)
      for (int i = 0; i < m; ++i) w[size_t(i)] = micro_batch_weight(narrow(targets, 0, i * rows, rows), global_counted);
    return w;
  }

  // The targets of a batch that count (not the ignore index -100).
  static int64_t counted_targets(const Tensor& targets) {
    const Tensor t = targets.device().is_cpu() ? contiguous(targets) : to_device(targets, Device::cpu());
    int64_t n = 0;
    for (int64_t v : t.to_vector<int64_t>()) n += v != -100;
    return n;
  }

  // f16: unscales `grads` and decides, the same on every rank (the inf/NaN flag all-reduced
  // with max over the whole world: dp, tp and pp), whether this step may run.
  bool unscale_and_check(const std::vector<Tensor>& grads) {
    return precision_.unscale_and_check(grads, job_->device, all_reduce_max());
  }
  // The same with the flag left on the device (a traced step's).
  Tensor unscale(const std::vector<Tensor>& grads) { return precision_.unscale(grads, job_->device, all_reduce_max()); }
  std::function<void(Tensor&)> all_reduce_max() {
    return [this](Tensor& flag) {
      if (!job_->world) return;
      dist::record_collective("all_reduce", {flag}, [world = job_->world.get()](Tensor* const* t) {
        return world->all_reduce(*t[0], {.op = dist::ReduceOp::max});
      })->wait();
    };
  }

  // Every parallel.replica_check_interval steps: the dp replicas' parameters still agree
  // (parallel/replica_check.h). `step` is the step just taken (0-based).
  void check_replicas(int64_t step) const {
    const int64_t every = cfg_.parallel.replica_check_interval;
    if (every > 0 && (step + 1) % every == 0) {
      parallel::check_replicas_agree(replicated_, ctx(), step + 1);
    }
  }

  // The names of parameters whose gradient another rank counts in the global norm: on the last
  // stage, the tied head weight (its summed gradient is also on stage 0, which counts it).
  std::set<std::string> second_tied_copy() const {
    std::set<std::string> out;
    Tensor tied = model_->tied_weight();
    if (!tied.defined() || ctx().pp_rank() != ctx().layout().pp - 1) return out;
    for (const auto& [name, p] : model_->named_parameters())
      if (p.impl() == tied.impl()) out.insert(name);
    return out;
  }

  // adapters.safetensors beside the checkpoint's model: every pipeline stage's writer (dp and tp
  // rank 0) holds its stage's adapters, which rank 0 gathers through the checkpoint folder.
  void save_all_adapters(const std::filesystem::path& dir, const NamedTensors& mine) {
    if (!job_->world) {
      save_adapters(dir / "adapters.safetensors", mine, cfg_.lora);
      return;
    }
    auto part = [&](int r) { return dir / str_cat(".adapters.rank", r, ".safetensors"); };
    if (!mine.empty()) save_adapters(part(rank()), mine, cfg_.lora);
    barrier();
    if (rank() == 0) {
      NamedTensors all;
      for (int r = 0; r < job_->ctx->world_size(); ++r) {
        if (!std::filesystem::exists(part(r))) continue;
        for (auto& [name, t] : load_adapters(part(r)).tensors) all.emplace_back(name, t);
        std::filesystem::remove(part(r));
      }
      save_adapters(dir / "adapters.safetensors", all, cfg_.lora);
    }
    barrier();
  }

  // The parameters that train: all of them, or with LoRA the adapters alone.
  NamedTensors trainable() const {
    NamedTensors out;
    for (const auto& [name, p] : model_->named_parameters())
      if (p.requires_grad()) out.emplace_back(name, p);
    return out;
  }
  int64_t trainable_count() const {
    int64_t n = 0;
    for (const auto& [name, p] : trainable()) n += p.numel();
    return n;
  }

  // ZeRO-3: every block's parameters whole while it lives (a collective over dp), for what reads
  // or writes them outside a block's forward: checkpoints.
  struct WholeParameters {
    explicit WholeParameters(parallel::FullyShardedParams* sharded) : sharded(sharded) {
      if (sharded) sharded->gather_all();
    }
    ~WholeParameters() {
      if (sharded) sharded->release_all();
    }
    parallel::FullyShardedParams* sharded;
  };

  io::TrainConfig cfg_;
  int64_t vocab_;
  int64_t num_classes_;  // > 0: a sequence classifier (Note [classifier head])
  std::shared_ptr<ParallelJob> job_;
  TrainPrecision precision_{cfg_};
  std::shared_ptr<models::GPT> model_;
  std::unique_ptr<parallel::PipelineExecutor> pipe_;  // pp > 1
  std::unique_ptr<parallel::Reducer> reducer_;  // null in one process
  std::unique_ptr<parallel::FullyShardedParams> sharded_;  // ZeRO-3
  NamedTensors replicated_;  // the parameters every dp replica holds whole (all but ZeRO-3's blocks)
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<graph::StaticFunction> static_graph_;  // train.mode = "static"
  // train.mode = "static" with packed sequences: this step's micro_batch_weights, read by the
  // graph's refreshed arguments (empty otherwise).
  std::vector<double> static_weights_;
};

}  // namespace

std::shared_ptr<ParallelJob> ParallelJob::single(const io::ParallelConfig& config, Device device) {
  TRIREME_CHECK(config.world_size() == 1, "ParallelJob::single: the layout ", config.describe(), " needs ",
                config.world_size(), " processes");
  auto job = std::make_shared<ParallelJob>();
  job->env.world_size = 1;
  job->ctx = std::make_unique<parallel::ParallelContext>(parallel::ParallelContext::single(parallel_layout(config)));
  job->device = device;
  return job;
}

std::unique_ptr<StepRunner> make_step_runner(const io::TrainConfig& cfg, int64_t vocab, std::shared_ptr<ParallelJob> job,
                                             int64_t num_classes) {
  return std::make_unique<ParallelRunner>(cfg, vocab, std::move(job), num_classes);
}

}  // namespace trireme::train
