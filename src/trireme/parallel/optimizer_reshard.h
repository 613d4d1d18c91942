// Optimizer state across parallel layouts: a checkpoint's per-rank optimizer files reassembled
// into whole single-process tensors, and whole tensors cut into one rank's part of another layout.
//
// Note [resuming in another layout]
// A checkpoint holds the model whole (model.safetensors) but the optimizer state per rank
// (optimizer.rank<R>.safetensors), cut three ways: tensor parallelism (each rank's tp shard of a
// parameter, under the single-process name, ShardSpec), pipeline stages (each rank's parameters
// only; the tied head weight on two stages, equal copies) and ZeRO-1 (each dp rank's flat element
// ranges of each parameter's tp shard, "state.<param>[<begin>:<end>].<key>", zero.h). Every piece
// names its parameter and says where it lies once the rank's tp coordinate is known (the mesh is
// (dp, pp, tp), tp fastest), so the whole state follows from the files and the old layout, and
// nothing about the old run's buckets or stage partition needs recomputing. Reassembling at load
// rather than saving whole tensors keeps saving as cheap as it is (no gathers) and reads every
// checkpoint written so far. The cost, paid once per resume: each new rank reads all the old
// files and holds the whole state of the parameters it keeps while cutting its part.
//
//   auto whole = whole_optimizer_state(read_rank_file, {.dp = 2, .tp = 2, .zero = 1}, models::gpt_shard_rule(cfg, 2), shapes);
//   auto mine = shard_optimizer_state(whole, gpt->named_parameters(), gpt->shard_specs());
//   optimizer.load_unsharded_state_dict(mine);   // AdamW, SGD or ZeroOptimizer alike
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/parallel/shard.h"

namespace trireme::parallel {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// The layout that wrote a checkpoint's optimizer files (state.json's "layout").
struct SavedLayout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;  // the ZeRO stage (any stage >= 1 writes its shards alike)
  int world_size() const { return dp * tp * pp; }
};

// The whole optimizer state in Optimizer::state_dict's format: "state.<param>.<key>" as whole
// single-process tensors, plus every other entry ("step", "lr", "amp.*") from rank 0 ("zero.*"
// dropped). `rank_state(r)` reads world rank r's file (called once per rank needed: without
// ZeRO only dp rank 0's ranks, the others holding copies); `full_shapes` the single-process
// parameter shapes (model.safetensors). Errors name the parameter whose pieces do not add up.
std::map<std::string, Tensor> whole_optimizer_state(const std::function<NamedTensorList(int rank)>& rank_state,
                                                    const SavedLayout& old, const ShardRule& rule,
                                                    const std::map<std::string, Shape>& full_shapes);

// This process's part of a whole state: for each of `params` (names as held), its state
// tensors cut to its tp shard (per `tp_specs`; absent: whole), plus the non-"state." entries.
// Parameters the whole state has no entries for get none (the optimizer creates them).
std::map<std::string, Tensor> shard_optimizer_state(const std::map<std::string, Tensor>& whole,
                                                    const NamedTensorList& params,
                                                    const std::map<std::string, ShardSpec>& tp_specs);

}  // namespace trireme::parallel
