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

// Parameter elements of a GPT (models::GPTConfig::num_parameters, in doubles so that absurd
// sizes give a huge estimate instead of an overflow).
double gpt_parameters(double V, double T, double L, double d, bool bias, bool tied) {
  const double b = bias ? 1 : 0;
  const double per_layer = 12 * d * d + b * 9 * d + 2 * (d + b * d);  // attention 4d², MLP 8d², biases, 2 norms
  return V * d * (tied ? 1 : 2) + T * d + L * per_layer + d + b * d;
}

// Activations a transformer layer keeps for its backward, per token, in stored values of `elt`
// bytes: 15·d + heads·T. Korthikanti et al. ("Reducing Activation Recomputation in Large
// Transformer Models", 2022, §4.1) count 34·d + 5·heads·T bytes at 2-byte activations: the
// norms' inputs, Q/K/V, the attention output, the MLP's 4d hidden before and after GELU, both
// the scores and the softmax per head, and 1-byte dropout masks. trireme keeps no masks and
// one T-wide row per head, which leaves 15·d + heads·T. Measured peaks of CPU f32 training
// (d_model 128-512, block 64-256, batch 4-16) are 0.95 to 1.09 times weights + optimizer state +
// max(gradients, these activations + the f32 logits).
double layer_activation_bytes_per_token(double d, double heads, double T, double elt) {
  return elt * (15 * d + heads * T);
}

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

MemoryEstimate estimate_training_memory(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  const auto& p = cfg.parallel;
  double V = double(vocab_size);
  if (vocab_size <= 0) V = cfg.data.tokenizer == "bpe" ? double(cfg.data.bpe_vocab_size) : 256;
  const double d = double(m.d_model), T = double(m.block_size), L = double(m.n_layer);
  const double dp = double(std::max<int64_t>(p.dp, 1)), tp = double(std::max<int64_t>(p.tp, 1)),
               pp = double(std::max<int64_t>(p.pp, 1)), micro = double(std::max<int64_t>(p.micro_batches, 1));

  MemoryEstimate e;
  // Tensor parallelism splits each layer over tp, the pipeline splits the layers over pp.
  e.parameters = gpt_parameters(V, T, L, d, m.bias, m.tie_embeddings) / (tp * pp);
  e.weight_bytes = 4 * e.parameters;  // f32, also the master weights under bf16/f16 autocast
  e.gradient_bytes = 4 * e.parameters;
  const double state_per_param = cfg.optim.name == "adamw" ? 8 : (cfg.optim.momentum > 0 ? 4 : 0);
  e.optimizer_bytes = state_per_param * e.parameters / (p.zero ? dp : 1);

  // One micro-batch of batch_size / (dp x micro_batches) sequences is live at a time without a
  // pipeline; a 1F1B pipeline's first stage holds up to pp of them, GPipe all of them.
  double in_flight = 1;
  if (p.pp > 1) in_flight = p.schedule == "gpipe" ? micro : std::min(micro, pp);
  const double micro_sequences = double(cfg.train.batch_size) / (dp * micro);
  const double sequences = micro_sequences * in_flight;
  const double elt = cfg.train.precision == "f32" ? 4 : 2;
  const double per_layer = layer_activation_bytes_per_token(d / tp, double(m.n_head) / tp, T, elt);
  // Recomputed blocks keep only their input (the f32 residual stream) while the step goes on;
  // in the backward one of them holds its activations again, for one micro-batch.
  const double layers = L / pp;
  const double recomputed = cfg.memory.recompute == "full"
                                ? (cfg.memory.recompute_layers < 0 ? layers
                                                                   : std::min(layers, double(cfg.memory.recompute_layers)))
                                : 0;
  const double per_token = per_layer * (layers - recomputed) + 4 * d * recomputed;
  const double logits = 4 * V / tp;  // f32 logits
  e.activation_bytes = sequences * T * (per_token + logits) + (recomputed > 0 ? micro_sequences * T * per_layer : 0);
  return e;
}

MemoryEstimate estimate_inference_memory(const models::GPTConfig& c) {
  const double d = double(c.d_model), T = double(c.block_size), V = double(c.vocab_size);
  MemoryEstimate e;
  e.parameters = gpt_parameters(V, T, double(c.n_layer), d, c.bias, c.tie_embeddings);
  e.weight_bytes = 4 * e.parameters;
  // One sequence's forward keeps a layer's working set at a time: the 4d-wide MLP hidden, the
  // heads' T x T scores, and the logits.
  e.activation_bytes = 4 * T * (4 * d + double(c.n_head) * T + V);
  return e;
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
  parts += e.gradient_bytes > 0 ? str_cat(" + the larger of ", format_bytes(e.activation_bytes), " activations and ",
                                          format_bytes(e.gradient_bytes), " gradients")
                                : str_cat(" + ", format_bytes(e.activation_bytes), " activations");
  const std::string params = e.parameters < 1e18 ? std::to_string(int64_t(e.parameters)) : str_cat(e.parameters);
  return str_cat("memory: ", what, " needs about ", format_bytes(needed), " (", parts, ", ", params,
                 " parameters), but ", device_words(device), " ", format_bytes(available), " available; ", advice);
}

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
  const std::string why = memory_refusal(e, needed, *available, device, what, advice);
  if (!why.empty()) throw io::ConfigError(why + " (--set train.memory_check=false skips this check)");
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
