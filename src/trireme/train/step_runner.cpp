// The one-process StepRunner (see step_runner.h).
#include "trireme/train/step_runner.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/optim/sgd.h"
#include "trireme/parallel/optimizer_reshard.h"

namespace trireme::train {

models::GPTConfig gpt_config(const io::TrainConfig& cfg, int64_t vocab) {
  return {.vocab_size = vocab,
          .block_size = cfg.model.block_size,
          .n_layer = cfg.model.n_layer,
          .n_head = cfg.model.n_head,
          .d_model = cfg.model.d_model,
          .dropout = cfg.model.dropout,
          .bias = cfg.model.bias,
          .tie_embeddings = cfg.model.tie_embeddings};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const io::TrainConfig& cfg, const optim::NamedParams& params) {
  if (cfg.optim.name == "adamw") {
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions{.lr = cfg.optim.lr, .betas = {cfg.optim.beta1, cfg.optim.beta2},
                                    .eps = cfg.optim.eps, .weight_decay = cfg.optim.weight_decay});
  }
  return std::make_unique<optim::SGD>(
      params, optim::SGDOptions{.lr = cfg.optim.lr, .momentum = cfg.optim.momentum, .weight_decay = cfg.optim.weight_decay});
}

double host_value(const Tensor& t) {
  return t.device().is_cpu() ? t.detach().item() : to_device(t.detach(), Device::cpu()).item();
}

namespace {

// The layout a checkpoint was written in (what state.json records; one process when absent).
nlohmann::json saved_layout(const Checkpoint& ckpt) {
  nlohmann::json one{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"virtual_stages", 1}, {"zero", false}};
  return ckpt.state.contains("layout") && ckpt.state["layout"].is_object() ? ckpt.state["layout"] : one;
}

int64_t layout_int(const nlohmann::json& layout, const char* key) {
  return layout.contains(key) && layout[key].is_number_integer() ? layout[key].get<int64_t>() : 1;
}

}  // namespace

bool optimizer_layout_differs(const Checkpoint& ckpt, const nlohmann::json& layout) {
  const nlohmann::json saved = saved_layout(ckpt);
  for (const char* key : {"dp", "tp", "pp", "virtual_stages"}) {
    if (layout_int(saved, key) != layout_int(layout, key)) return true;
  }
  if (saved.value("zero", false) != layout.value("zero", false)) return true;
  // ZeRO cuts its shards along the data-parallel buckets: another bucket size is another cut.
  // (Checkpoints written before the layout recorded it are taken to have this run's.)
  return saved.contains("bucket_mb") && layout.contains("bucket_mb") && saved["bucket_mb"] != layout["bucket_mb"];
}

std::map<std::string, Tensor> load_whole_optimizer_state(const std::filesystem::path& dir, const Checkpoint& ckpt,
                                                         const models::GPTConfig& model) {
  const nlohmann::json saved = saved_layout(ckpt);
  const parallel::SavedLayout old{.dp = int(layout_int(saved, "dp")), .tp = int(layout_int(saved, "tp")),
                                  .pp = int(layout_int(saved, "pp")), .zero = saved.value("zero", false)};
  const int64_t files = ckpt.state.value("world_size", int64_t(1));
  TRIREME_CHECK(files == old.world_size(), "checkpoint '", dir.string(), "': state.json says ", files,
                " ranks wrote it, but its layout ", saved.dump(), " has ", old.world_size());
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : ckpt.model) shapes[name] = t.sizes();
  return parallel::whole_optimizer_state([&](int rank) { return load_checkpoint_optimizer(dir, rank); }, old,
                                         models::gpt_shard_rule(model, old.tp), shapes);
}

namespace {

class SingleProcessRunner : public StepRunner {
 public:
  SingleProcessRunner(const io::TrainConfig& cfg, int64_t vocab, Device device)
      : cfg_(cfg), device_(device), vocab_(vocab),
        model_(std::make_unique<models::GPT>(gpt_config(cfg, vocab), uint64_t(cfg.train.seed))) {
    if (!device_.is_cpu()) model_->to(device_);
    // After the move: the optimizer keeps the parameters (and creates its state) where they are.
    optimizer_ = make_optimizer(cfg, model_->named_parameters());
  }

  Device device() const override { return device_; }

  std::string describe_layout() const override { return "1 process (dp=1 tp=1 pp=1)"; }
  nlohmann::json layout_json() const override {
    return {{"dp", 1}, {"tp", 1}, {"pp", 1}, {"virtual_stages", 1}, {"zero", false}};
  }
  int64_t num_parameters() override { return model_->num_parameters(); }
  void set_lr(double lr) override { optimizer_->set_lr(lr); }

  StepResult train_step(int64_t step, const io::DataLoader& train) override {
    // Dropout masks are a function of (seed, step, layer name): resuming reproduces them.
    model_->set_rng(uint64_t(cfg_.train.seed), uint64_t(step));
    io::Batch b = on_device(train.batch(step, cfg_.train.batch_size));
    Tensor loss;
    {
      auto autocast = precision_.autocast_guard(device_);
      loss = model_->loss(b.inputs, b.targets);
    }
    precision_.scale_loss(loss).backward();
    StepResult r{.loss = host_value(loss), .grad_norm = NAN};
    if (precision_.unscale_and_check(grads_of(optimizer_->params()), device_)) {
      r.grad_norm = cfg_.optim.grad_clip > 0 ? optim::clip_grad_norm(optimizer_->params(), cfg_.optim.grad_clip)
                                             : optim::grad_norm(model_->parameters());
      optimizer_->step();
    }
    optimizer_->zero_grad(true);
    if (precision_.has_scaler()) r.loss_scale = precision_.loss_scale(), r.skipped_steps = precision_.skipped_steps();
    return r;
  }

  double eval_loss(const io::DataLoader& val, int64_t batches) override {
    NoGradGuard no_grad;
    auto autocast = precision_.autocast_guard(device_);
    model_->eval();
    double total = 0;
    for (int64_t i = 0; i < batches; ++i) {
      io::Batch b = on_device(val.batch(i, cfg_.train.batch_size));
      total += host_value(model_->loss(b.inputs, b.targets));
    }
    model_->train();
    return total / double(batches);
  }

  std::filesystem::path save(const std::filesystem::path& root, Checkpoint ckpt) override {
    ckpt.model = model_->state_dict();
    ckpt.optimizer = optimizer_->state_dict();
    precision_.add_state(ckpt.optimizer);
    return save_checkpoint(root, ckpt);
  }

  void load(const std::filesystem::path& dir, const Checkpoint& ckpt) override {
    model_->load_state_dict(ckpt.model);
    if (optimizer_layout_differs(ckpt, layout_json())) {
      optimizer_->load_state_dict(precision_.take_state(load_whole_optimizer_state(dir, ckpt, gpt_config(cfg_, vocab_))));
      return;
    }
    NamedTensors opt = ckpt.optimizer.empty() ? load_checkpoint_optimizer(dir, 0) : ckpt.optimizer;
    optimizer_->load_state_dict(precision_.take_state(std::map<std::string, Tensor>(opt.begin(), opt.end())));
  }

 private:
  io::Batch on_device(io::Batch b) const {
    if (!device_.is_cpu()) b.inputs = to_device(b.inputs, device_), b.targets = to_device(b.targets, device_);
    return b;
  }

  io::TrainConfig cfg_;
  Device device_;
  int64_t vocab_;
  std::unique_ptr<models::GPT> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  TrainPrecision precision_{cfg_};
};

}  // namespace

std::unique_ptr<StepRunner> make_single_process_runner(const io::TrainConfig& cfg, int64_t vocab, Device device) {
  return std::make_unique<SingleProcessRunner>(cfg, vocab, device);
}

}  // namespace trireme::train
