// A check, before anything is allocated, that a model and a batch fit in the memory the device
// has: a run that cannot fit is refused at once with the estimate, what is available and which
// keys to change, instead of allocating until the OOM killer ends it.
//
// The estimate (memory_estimate.h) counts what a run holds, not allocator slack or short-lived
// temporaries, so a refusal means the run cannot fit, while passing does not promise that it
// does. The config key train.memory_check = false skips it for training, the
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
#include "trireme/train/memory_estimate.h"

namespace trireme::train {

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
