// Checkpoints: a folder per saved step, written atomically, plus a `latest` pointer.
//
//   out/checkpoints/step_00000200/{model.safetensors, optimizer.safetensors, state.json}
//   out/checkpoints/latest          <- "step_00000200", replaced by rename
//
// Saving writes a hidden temporary folder, fsyncs every file and the folder, renames it into
// place, then atomically replaces `latest`. A process killed at any point leaves the previous
// checkpoint and pointer intact (a stray temporary folder is removed by the next save).
//
// Parallel runs save collectively (save_checkpoint_distributed): the model still goes into one
// model.safetensors of whole single-process tensors (so `trireme generate` and a one-process
// resume read it), while each rank's optimizer state goes into optimizer.rank<R>.safetensors:
//   out/checkpoints/step_00000200/{model.safetensors, optimizer.rank0.safetensors, ...,
//                                  optimizer.rank3.safetensors, state.json ("world_size": 4)}
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trireme/core/tensor.h"

namespace trireme::dist {
class ProcessGroup;
}

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

// Every rank of `world` calls this together, each with its own part:
//   ckpt.model      the model tensors this rank writes (whole single-process tensors): rank 0
//                   always has some; other ranks may add theirs (a pipeline stage's layers) or
//                   pass none. Rank 0 merges them into model.safetensors, rank order, the first
//                   copy of a name winning (a tied weight held by two stages is written once).
//   ckpt.optimizer  this rank's optimizer state -> optimizer.rank<R>.safetensors
//   ckpt.state      used on rank 0 only
// Rank 0 makes the temporary folder, every rank writes and fsyncs its files, rank 0 writes
// model.safetensors and state.json and renames the folder into place; barriers in between, and
// one at the end, so the checkpoint is complete on return on every rank.
std::filesystem::path save_checkpoint_distributed(const std::filesystem::path& root, const Checkpoint& ckpt,
                                                  dist::ProcessGroup& world, int keep = 2);

// Loads one checkpoint folder; errors name the folder and the missing or malformed file.
// For a distributed checkpoint (state.json has "world_size"), `optimizer` stays empty: each
// rank reads its own with load_checkpoint_optimizer.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// The optimizer state of rank `rank`: optimizer.rank<R>.safetensors of a distributed checkpoint,
// or optimizer.safetensors of a one-process one (rank 0 only).
NamedTensors load_checkpoint_optimizer(const std::filesystem::path& dir, int rank);

// The folder `latest` points to under root, if any. Accepts a checkpoint folder itself too.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& root_or_dir);

}  // namespace trireme::train
