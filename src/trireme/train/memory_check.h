// A check, before anything is allocated, that a model and a batch fit in the memory the device
// has: a run that cannot fit is refused at once with the estimate, what is available and which
// keys to change, instead of allocating until the OOM killer ends it.
//
// The estimate is deliberately simple (weights, optimizer state, and the larger of the
// gradients and the activations; no allocator slack, temporaries or autocast copies): within
// about 10% of measured peaks, so a refusal means the run cannot fit, while passing does not
// promise that it does. The config key train.memory_check = false skips it for training, the
// flag --no-memory-check for generate and eval.
//
//   train::check_training_memory(cfg, /*vocab_size=*/0, Device::cpu(), /*processes_on_host=*/1);
//   train::check_inference_memory(gpt_config, Device::cuda(0));   // before building the model
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "trireme/core/device.h"
#include "trireme/io/config.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

// Bytes of one process, as doubles (the inputs may be absurd; nothing here can overflow).
struct MemoryEstimate {
  double parameters = 0;        // elements held by this process
  double weight_bytes = 0;      // f32 weights (master weights under bf16/f16 autocast)
  double gradient_bytes = 0;    // f32 gradients
  double optimizer_bytes = 0;   // AdamW m and v, or SGD momentum
  double activation_bytes = 0;  // what the forward keeps for the backward, plus the logits
  // The peak: the backward frees activations as it makes gradients, so the two mostly take
  // turns (see layer_activation_bytes_per_token for how this compares with measured peaks).
  double total() const { return weight_bytes + optimizer_bytes + std::max(gradient_bytes, activation_bytes); }
};

// One process's share of a training run of `cfg`. vocab_size <= 0 means not known yet (before
// the data is prepared): data.bpe_vocab_size for BPE, 256 for characters (a lower bound).
MemoryEstimate estimate_training_memory(const io::TrainConfig& cfg, int64_t vocab_size);
// Sampling one sequence of up to block_size tokens: the weights and a forward's activations.
MemoryEstimate estimate_inference_memory(const models::GPTConfig& cfg);

// The bytes a new allocation on `device` can get now: for the CPU the smaller of
// /proc/meminfo's MemAvailable and the cgroup's memory.max - memory.current; for a GPU
// cudaMemGetInfo's free bytes. nullopt when it cannot be read (the check then passes).
std::optional<double> available_memory(Device device);

// "" when `needed` bytes fit in `available`, else the one-line reason (for tests; the checks
// below throw it). `what` names the job ("training", "generation"), `advice` the keys to change.
std::string memory_refusal(const MemoryEstimate& e, double needed, double available, Device device,
                           const std::string& what, const std::string& advice);

// Throw io::ConfigError (exit status 2) when the estimate exceeds the available memory, saying
// how to skip the check. processes_on_host: CPU processes of the job sharing this machine's
// memory. The training check does nothing when cfg.train.memory_check is false; the inference
// check's callers decide whether to call it.
void check_training_memory(const io::TrainConfig& cfg, int64_t vocab_size, Device device, int processes_on_host = 1);
void check_inference_memory(const models::GPTConfig& cfg, Device device);

// "1.5 GiB": bytes for messages.
std::string format_bytes(double bytes);

}  // namespace trireme::train
