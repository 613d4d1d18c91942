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

models::GPTConfig gpt_config(const io::TrainConfig& cfg, int64_t vocab, int64_t num_classes) {
  const bool llama = cfg.model.arch == "llama";
  if (cfg.model.vocab_size > 0 && cfg.model.vocab_size < vocab)
    throw io::ConfigError(str_cat("model.vocab_size: expected at least the tokenizer's ", vocab, " tokens, got ",
                                  cfg.model.vocab_size, "; set it to 0 to use the tokenizer's size"));
  return {.arch = llama ? models::GPTArch::llama : models::GPTArch::gpt2,
          .vocab_size = cfg.model.vocab_size > 0 ? cfg.model.vocab_size : vocab,
          .block_size = cfg.model.block_size,
          .n_layer = cfg.model.n_layer,
          .n_head = cfg.model.n_head,
          .d_model = cfg.model.d_model,
          .dropout = cfg.model.dropout,
          .bias = cfg.model.bias,
          .tie_embeddings = cfg.model.tie_embeddings,
          .ln_eps = cfg.model.norm_eps,
          .ffn = cfg.model.intermediate_size,
          .n_kv_head = llama ? cfg.model.n_kv_head : 0,
          .rope_theta = cfg.model.rope_theta,
          .qkv_bias = llama && cfg.model.qkv_bias,
          .num_classes = num_classes};
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
  nlohmann::json one{{"dp", 1}, {"tp", 1}, {"pp", 1}, {"virtual_stages", 1}, {"zero", 0}};
  return ckpt.state.contains("layout") && ckpt.state["layout"].is_object() ? ckpt.state["layout"] : one;
}

// The ZeRO stage a layout records: a number, or (checkpoints written before stages 2 and 3) a
// boolean for stage 1.
int zero_stage(const nlohmann::json& layout) {
  if (!layout.contains("zero")) return 0;
  const auto& z = layout["zero"];
  return z.is_boolean() ? int(z.get<bool>()) : z.is_number_integer() ? z.get<int>() : 0;
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
  if (zero_stage(saved) != zero_stage(layout)) return true;
  // ZeRO cuts its shards along the data-parallel buckets: another bucket size is another cut.
  // (Checkpoints written before the layout recorded it are taken to have this run's.)
  return saved.contains("bucket_mb") && layout.contains("bucket_mb") && saved["bucket_mb"] != layout["bucket_mb"];
}

std::map<std::string, Tensor> load_whole_optimizer_state(const std::filesystem::path& dir, const Checkpoint& ckpt,
                                                         const models::GPTConfig& model) {
  const nlohmann::json saved = saved_layout(ckpt);
  const parallel::SavedLayout old{.dp = int(layout_int(saved, "dp")), .tp = int(layout_int(saved, "tp")),
                                  .pp = int(layout_int(saved, "pp")), .zero = zero_stage(saved)};
  const int64_t files = ckpt.state.value("world_size", int64_t(1));
  TRIREME_CHECK(files == old.world_size(), "checkpoint '", dir.string(), "': state.json says ", files,
                " ranks wrote it, but its layout ", saved.dump(), " has ", old.world_size());
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : ckpt.model) shapes[name] = t.sizes();
  return parallel::whole_optimizer_state([&](int rank) { return load_checkpoint_optimizer(dir, rank); }, old,
                                         models::gpt_shard_rule(model, old.tp), shapes);
}

}  // namespace trireme::train
