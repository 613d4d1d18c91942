#include "trireme/models/lora_names.h"

namespace trireme::models {

bool is_lora_name(const std::string& name) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".lora.A") || ends_with(".lora.B");
}

nn::NamedTensors lora_tensors(const nn::NamedTensors& state) {
  nn::NamedTensors out;
  for (const auto& [name, t] : state)
    if (is_lora_name(name)) out.emplace_back(name, t);
  return out;
}

}  // namespace trireme::models
