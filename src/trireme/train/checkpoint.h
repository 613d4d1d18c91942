// Checkpoints: a folder per saved step, written atomically, plus a `latest` pointer.
//
//   out/checkpoints/step_00000200/{model.safetensors, optimizer.safetensors, state.json}
//   out/checkpoints/latest          <- "step_00000200", replaced by rename
//
// Saving writes a hidden temporary folder, fsyncs every file and the folder, renames it into
// place, then atomically replaces `latest`. A process killed at any point leaves the previous
// checkpoint and pointer intact (a stray temporary folder is removed by the next save).
//
// Integrity: state.json lists every tensor file with its XXH3-64 checksum and the step it belongs
// to ("files": {"model.safetensors": {"xxh3": "<16 hex>", "step": 200}, ...}); each tensor file
// also carries the step in its safetensors metadata ("trireme.step"). Loading verifies all of it
// and refuses a mismatch naming the file. Checkpoints written before checksums load unverified.
//
// Rotation keeps the newest `keep` complete checkpoints up to the one just written; it never
// deletes a checkpoint newer than that one, nor a folder that is not a complete checkpoint.
//
// Parallel runs save collectively (save_checkpoint_distributed): the model still goes into one
// model.safetensors of whole single-process tensors (so `trireme generate` and a one-process
// resume read it), while each rank's optimizer state goes into optimizer.rank<R>.safetensors:
//   out/checkpoints/step_00000200/{model.safetensors, optimizer.rank0.safetensors, ...,
//                                  optimizer.rank3.safetensors, state.json ("world_size": 4)}
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
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
  bool verified = false;  // loaded files matched the checksums in state.json (false: an old checkpoint)
};

// "step_00000200": the folder name of a step.
std::string checkpoint_folder_name(int64_t step);
// XXH3-64 of `bytes` as 16 lowercase hex digits (what state.json records per file).
std::string checkpoint_checksum(std::string_view bytes);

// Saves under `root` (e.g. out/checkpoints) as step_<step>; keeps the newest `keep` checkpoints.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, const Checkpoint& ckpt, int keep = 2);
// Test seam: save_checkpoint calls this once the model file is written and before the save is
// complete (a test kills the process there); an empty function removes it.
void set_save_checkpoint_test_hook(std::function<void()> after_model_written);

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

// Loads one checkpoint folder, verified (see above); errors name the folder, the file and, where
// known, the tensor or state.json key. A one-process checkpoint's optimizer.safetensors is
// loaded too (and required); for a distributed checkpoint (state.json has "world_size"),
// `optimizer` stays empty: each rank reads its own with load_checkpoint_optimizer. What the optimizer state holds is checked by
// load_checkpoint_optimizer and checkpoint_problem (a resume goes through both).
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// state.json and model.safetensors only, verified: what `trireme generate` needs (it works
// without any optimizer file).
Checkpoint load_checkpoint_model(const std::filesystem::path& dir);

// The optimizer state of rank `rank`: optimizer.rank<R>.safetensors of a distributed checkpoint,
// or optimizer.safetensors of a one-process one (rank 0 only). Verified, and checked to hold what
// an optimizer needs: a one-element integer "step", floating-point state tensors, AdamW's
// exp_avg and exp_avg_sq together for each parameter, the same state keys for every parameter
// and, in a one-process checkpoint past step 0, state for every model tensor. Errors name the
// file and the tensor.
NamedTensors load_checkpoint_optimizer(const std::filesystem::path& dir, int rank);

// Why `dir` is not a complete checkpoint of step `expected_step` (a file missing, a checksum or
// step mismatch, unreadable JSON, ...), or nullopt when it is one: every file listed is read and
// verified. `expected_step` < 0: the step in the folder's name.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& dir, int64_t expected_step = -1);

// The checkpoint folder a run under `root` (out/checkpoints) continues from.
struct ResumePoint {
  std::optional<std::filesystem::path> dir;  // none: no complete checkpoint under root
  int64_t step = 0;                          // dir's step
  std::vector<std::string> notes;            // what was skipped and why (for the log)
  bool found_any = false;                    // some step_* folder exists, complete or not
};
// The folder `latest` names when it is a complete checkpoint; otherwise (pointer missing, empty,
// garbage, dangling, or naming a damaged checkpoint) the newest complete step_* folder.
ResumePoint find_resume_checkpoint(const std::filesystem::path& root);

// The folder `latest` points to under root, or when that pointer is unusable the newest step_*
// folder with a state.json (not verified: see find_resume_checkpoint). Accepts a checkpoint
// folder itself too.
std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& root_or_dir);

}  // namespace trireme::train
