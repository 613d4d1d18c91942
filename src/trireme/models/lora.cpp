// LoRA on the GPT (see lora.h).
#include "trireme/models/lora.h"

#include <algorithm>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"

namespace trireme::models {

std::vector<std::string> lora_target_layers(GPTArch arch) {
  if (arch == GPTArch::llama) return {"attn.q_proj", "attn.kv_proj", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  return {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
}

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

std::map<std::string, Tensor> merge_lora(const std::map<std::string, Tensor>& state, double scale,
                                         const std::string& source) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : state)
    if (!is_lora_name(name)) out[name] = t;
  for (const auto& [name, a] : state) {
    if (!ends_with(name, ".lora.A")) continue;
    const std::string layer = name.substr(0, name.size() - 7);
    auto b = state.find(layer + ".lora.B");
    TRIREME_CHECK(b != state.end(), source, ": adapter '", name, "' has no '", layer, ".lora.B'");
    auto w = out.find(layer + ".weight");
    TRIREME_CHECK(w != out.end(), source, ": adapter '", name, "' is for a layer '", layer,
                  "' that the base model does not have (an adapter made for another model)");
    const Shape ws = w->second.sizes(), as = a.sizes(), bs = b->second.sizes();
    TRIREME_CHECK(ws.size() == 2 && as.size() == 2 && bs.size() == 2 && as[0] == bs[1] && bs[0] == ws[0] &&
                      as[1] == ws[1],
                  source, ": adapter '", layer, ".lora' has B ", bs, " and A ", as, ", which do not fit '", layer,
                  ".weight' ", ws, " (B must be (out, r) and A (r, in) of a weight (out, in): an adapter made for "
                  "another base model)");
    const Tensor delta = matmul(to_dtype(b->second, DType::f32), to_dtype(a, DType::f32)) * scale;
    w->second = to_dtype(to_dtype(w->second, DType::f32) + delta, w->second.dtype());
  }
  for (const auto& [name, t] : state) {
    TRIREME_CHECK(!ends_with(name, ".lora.B") || state.count(name.substr(0, name.size() - 1) + "A"), source,
                  ": adapter '", name, "' has no matching '.lora.A'");
  }
  return out;
}

}  // namespace trireme::models

namespace trireme::models {

void GPT::add_lora(const parallel::LoraOptions& options, const std::vector<std::string>& targets) {
  TRIREME_CHECK(!has_lora_, "LoRA: the model already has adapters");
  const std::vector<std::string> known = lora_target_layers(config_.arch);
  std::vector<std::string> chosen;
  for (const std::string& t : targets) {
    if (t == "all") {
      chosen = known;
      break;
    }
    TRIREME_CHECK(std::find(known.begin(), known.end(), t) != known.end(), "LoRA: unknown target layer '", t,
                  "' for this architecture");
    if (std::find(chosen.begin(), chosen.end(), t) == chosen.end()) chosen.push_back(t);
  }
  TRIREME_CHECK(!chosen.empty(), "LoRA: no target layers");
  for (const auto& chunk : blocks_) {
    for (const auto& block : chunk) {
      for (auto& [name, m] : block->named_modules()) {
        if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) continue;
        if (auto* col = dynamic_cast<parallel::ColumnParallelLinear*>(m)) {
          col->add_lora(options);
        } else if (auto* row = dynamic_cast<parallel::RowParallelLinear*>(m)) {
          row->add_lora(options);
        }
      }
    }
  }
  // The adapters train, and a task head (Note [classifier head]), which starts untrained.
  for (auto& [name, p] : named_parameters())
    if (!is_lora_name(name) && name.rfind("classifier.", 0) != 0) p.set_requires_grad(false);
  specs_ = parallel::collect_shard_specs(*this);
  has_lora_ = true;
}

}  // namespace trireme::models
