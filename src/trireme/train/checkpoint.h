// Checkpoints: a folder per saved step, written atomically, plus a `latest` pointer.
//
//   out/checkpoints/step_00000200/{model.safetensors, optimizer.safetensors, state.json}
//   out/checkpoints/latest          <- "step_00000200", replaced by rename
//
// Saving writes a hidden temporary folder, fsyncs every file and the folder, renames it into
// place, then atomically replaces `latest`. A process killed at any point leaves the previous
// checkpoint and pointer intact (a stray temporary folder is removed by the next save).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trireme/core/tensor.h"

namespace trireme::train {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Checkpoint {
  int64_t step = 0;
  NamedTensors model;
  NamedTensors optimizer;
  nlohmann::json state;  // RNG, data position, config text, anything else the trainer restores
};

// Saves under `root` (e.g. out/checkpoints) as step_<step>; keeps the newest `keep` checkpoints.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const Checkpoint& ckpt, int keep = 2);

// Loads one checkpoint folder; errors name the folder and the missing or malformed file.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// The folder `latest` points to under root, if any. Accepts a checkpoint folder itself too.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& root_or_dir);

}  // namespace trireme::train
