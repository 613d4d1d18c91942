// The memory check (see memory_check.h).
#include "trireme/train/memory_check.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#ifdef TRIREME_WITH_CUDA
#include <cuda_runtime.h>

#include "trireme/cuda/device.h"
#endif

namespace trireme::train {

namespace {

std::optional<double> read_number_file(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return std::nullopt;
  return v;
}

std::optional<double> cpu_available() {
  std::optional<double> avail;
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream is(line.substr(13));
      double kb = 0;
      if (is >> kb) avail = kb * 1024;
      break;
    }
  }
  // A container's limit (cgroup v2) can be far below what the host has.
  auto max = read_number_file("/sys/fs/cgroup/memory.max");
  auto cur = read_number_file("/sys/fs/cgroup/memory.current");
  if (max && cur) {
    double left = std::max(0.0, *max - *cur);
    avail = avail ? std::min(*avail, left) : left;
  }
  return avail;
}

std::string device_words(Device device) {
  return device.is_cpu() ? std::string("this machine has") : str_cat(device.str(), " has");
}

}  // namespace

std::string format_bytes(double bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  if (bytes >= 1024) return str_cat(bytes, " EiB");  // %.1f of 1e300 is 300 digits
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::optional<double> available_memory(Device device) {
  if (device.is_cpu()) return cpu_available();
#ifdef TRIREME_WITH_CUDA
  if (device.is_cuda() && cuda::is_available()) {
    cuda::DeviceGuard g(device.index);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return double(free_b);
    cudaGetLastError();
  }
#endif
  return std::nullopt;
}

std::string memory_refusal(const MemoryEstimate& e, double needed, double available, Device device,
                           const std::string& what, const std::string& advice) {
  if (needed <= available) return "";
  std::string parts = str_cat(format_bytes(e.weight_bytes), " weights");
  if (e.optimizer_bytes > 0) parts += str_cat(" + ", format_bytes(e.optimizer_bytes), " optimizer state");
  if (e.communication_bytes > 0) parts += str_cat(" + ", format_bytes(e.communication_bytes), " communication buffers");
  parts += e.gradient_bytes > 0 ? str_cat(" + the larger of ", format_bytes(e.activation_bytes), " activations and ",
                                          format_bytes(e.gradient_bytes), " gradients")
                                : str_cat(" + ", format_bytes(e.activation_bytes), " activations");
  const std::string params = e.parameters < 1e18 ? std::to_string(int64_t(e.parameters)) : str_cat(e.parameters);
  return str_cat("memory: ", what, " needs about ", format_bytes(needed), " (", parts, ", ", params,
                 " parameters), but ", device_words(device), " ", format_bytes(available), " available; ", advice);
}

namespace {

// Changes of the config that need less memory per process, each with what it would need: the
// refusal lists them so that the user sees which one fits. Splits over more processes only help
// where each process has its own device (a GPU); on the CPU the processes share one machine.
std::string lighter_alternatives(const io::TrainConfig& cfg, int64_t vocab_size, bool own_device, int sharing,
                                 double available) {
  struct Option {
    std::string change;
    io::TrainConfig cfg;
  };
  std::vector<Option> options;
  auto add = [&](std::string change, auto&& edit) {
    io::TrainConfig c = cfg;
    edit(c);
    options.push_back({std::move(change), c});
  };
  const auto& p = cfg.parallel;
  if (cfg.memory.recompute == "none") {
    add("memory.recompute = \"selective\"", [](auto& c) { c.memory.recompute = "selective"; });
  }
  if (cfg.memory.recompute != "full") add("memory.recompute = \"full\"", [](auto& c) { c.memory.recompute = "full"; });
  for (int64_t stage = p.zero + 1; p.dp > 1 && stage <= (p.pp > 1 ? 2 : 3); ++stage) {
    add(str_cat("parallel.zero = ", stage), [stage](auto& c) { c.parallel.zero = stage; });
  }
  if (cfg.train.batch_size % (p.dp * p.micro_batches * 2) == 0) {
    add(str_cat("parallel.micro_batches = ", p.micro_batches * 2), [](auto& c) { c.parallel.micro_batches *= 2; });
  }
  if (own_device && cfg.model.n_head % (p.tp * 2) == 0) {
    add(str_cat("parallel.tp = ", p.tp * 2, " (", p.world_size() * 2, " GPUs)"), [](auto& c) { c.parallel.tp *= 2; });
  }
  if (own_device && cfg.model.n_layer >= p.pp * 2 && (p.pp > 1 || cfg.train.batch_size % (p.dp * 2) == 0)) {
    add(str_cat("parallel.pp = ", p.pp * 2, " (", p.world_size() * 2, " GPUs)"), [](auto& c) {
      c.parallel.pp *= 2;
      if (c.parallel.micro_batches < 2) c.parallel.micro_batches = 2;
    });
  }
  std::vector<std::pair<double, std::string>> needs;
  for (const Option& o : options) {
    const double need = estimate_training_memory(o.cfg, vocab_size).total() * sharing;
    needs.emplace_back(need, str_cat(o.change, " needs ", format_bytes(need), need <= available ? " (fits)" : ""));
  }
  std::sort(needs.begin(), needs.end());
  std::string out;
  for (const auto& [need, text] : needs) out += (out.empty() ? "" : "; ") + text;
  return out;
}

}  // namespace

void check_training_memory(const io::TrainConfig& cfg, int64_t vocab_size, Device device, int processes_on_host) {
  if (!cfg.train.memory_check) return;
  const std::optional<double> available = available_memory(device);
  if (!available) return;
  const MemoryEstimate e = estimate_training_memory(cfg, vocab_size);
  // CPU processes of one job share the machine's memory; each GPU has its own.
  const int sharing = device.is_cpu() ? std::max(processes_on_host, 1) : 1;
  const double needed = e.total() * sharing;
  const std::string what = sharing > 1 ? str_cat("training (", sharing, " processes on this machine)") : "training";
  const bool model_heavy = e.activation_bytes < e.weight_bytes + e.optimizer_bytes;
  const std::string advice =
      model_heavy ? "lower model.n_layer or model.d_model (or spread the model with parallel.tp / parallel.pp)"
                  : "lower train.batch_size, model.block_size, model.n_layer or model.d_model (or raise "
                    "parallel.micro_batches)";
  std::string why = memory_refusal(e, needed, *available, device, what, advice);
  if (why.empty()) return;
  const std::string lighter = lighter_alternatives(cfg, vocab_size, !device.is_cpu(), sharing, *available);
  if (!lighter.empty()) why += str_cat(". Instead: ", lighter);
  throw io::ConfigError(why + " (trireme estimate shows every part; --force, or --set train.memory_check=false, skips this check)");
}

void check_inference_memory(const models::GPTConfig& cfg, Device device) {
  const std::optional<double> available = available_memory(device);
  if (!available) return;
  const MemoryEstimate e = estimate_inference_memory(cfg);
  const std::string why = memory_refusal(e, e.total(), *available, device, "the checkpoint's model",
                                         "use a machine or GPU with more memory");
  if (!why.empty()) throw io::ConfigError(why + " (--no-memory-check skips this check)");
}

}  // namespace trireme::train
