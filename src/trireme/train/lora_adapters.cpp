// adapters.safetensors (see lora_adapters.h).
#include "trireme/train/lora_adapters.h"

#include "trireme/io/file_write.h"
#include "trireme/io/safetensors.h"
#include "trireme/models/lora.h"

namespace trireme::train {

void save_adapters(const std::filesystem::path& path, const nn::NamedTensors& adapters, const io::LoraConfig& lora) {
  std::string targets;
  for (const auto& t : lora.targets) targets += (targets.empty() ? "" : ",") + t;
  io::write_file_atomic(path, io::serialize_safetensors(adapters, {{"trireme.lora.rank", std::to_string(lora.rank)},
                                                                   {"trireme.lora.alpha", str_cat(lora.alpha)},
                                                                   {"trireme.lora.targets", targets}}));
}

AdapterFile load_adapters(const std::filesystem::path& path) {
  io::SafetensorsFile f;
  try {
    f = io::load_safetensors(path.string());
  } catch (const Error& e) {
    throw io::ConfigError(str_cat("adapters '", path.string(), "': ", e.what()));
  }
  auto rank = f.metadata.find("trireme.lora.rank"), alpha = f.metadata.find("trireme.lora.alpha");
  if (rank == f.metadata.end() || alpha == f.metadata.end())
    throw io::ConfigError(str_cat("adapters '", path.string(), "': no trireme.lora.rank / trireme.lora.alpha in its ",
                                  "metadata (not an adapters.safetensors that trireme wrote)"));
  AdapterFile out;
  double r = 0, a = 0;
  try {
    r = std::stod(rank->second), a = std::stod(alpha->second);
  } catch (const std::exception&) {
  }
  if (!(r > 0) || !(a > 0))
    throw io::ConfigError(str_cat("adapters '", path.string(), "': rank '", rank->second, "' and alpha '",
                                  alpha->second, "' must be positive numbers"));
  out.scale = a / r;
  for (auto& [name, t] : f.tensors) {
    if (!models::is_lora_name(name))
      throw io::ConfigError(str_cat("adapters '", path.string(), "': '", name, "' is not an adapter tensor"));
    out.tensors[name] = t;
  }
  if (out.tensors.empty()) throw io::ConfigError(str_cat("adapters '", path.string(), "': no adapter tensors"));
  return out;
}

}  // namespace trireme::train
