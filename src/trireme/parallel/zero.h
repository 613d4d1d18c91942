// ZeroOptimizer: AdamW whose state is sharded over the data-parallel ranks (ZeRO stages 1-3).
//
// The Reducer (built with a ZeRO stage) reduce-scatters each gradient bucket, so dp rank k holds
// the averaged chunk k of every bucket. ZeroOptimizer runs AdamW on just those elements — written
// in place into the parameters, through 1-D views of the slices of each parameter that fall in
// rank k's chunks — and then all-gathers every bucket's parameter values so each rank has the
// whole updated model again. Each rank thus keeps exp_avg / exp_avg_sq for about 1/dp of the
// parameters; the update of each element is exactly AdamW's, so training matches unsharded AdamW.
// Under ZeRO-3 the elements of a unit's bucket live in the unit's shard (fully_sharded.h) and
// are not gathered after the step: the unit's next forward gathers them.
//
//   Reducer reducer(model.named_parameters(), ctx.dp_group(), {.bucket_bytes = 1 << 20, .zero = 1});
//   ZeroOptimizer opt(reducer, {.lr = 3e-4, .weight_decay = 0.1});   // an optim::Optimizer
//   reducer.prepare_backward();
//   model.loss(x, y).backward();
//   reducer.finish();                                   // shard gradients ready
//   clip_global_grad_norm(opt.grad_pieces(specs), 1.0, ctx);  // norm over every rank's shard
//   opt.step();                                         // update my shard, all-gather parameters
//   opt.zero_grad();
//
// Checkpoints: state_dict() holds only this rank's shard. Its optimizer entries are named by
// parameter and element range, "state.<param>[<begin>:<end>].exp_avg" (a flat range of the
// parameter as this process holds it, i.e. of its tp shard), next to "zero.dp_rank" and
// "zero.dp_size"; a checkpoint therefore has one optimizer file per dp rank, and
// load_state_dict() refuses a file written by another rank or dp size.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trireme/optim/adamw.h"
#include "trireme/parallel/data_parallel.h"
#include "trireme/parallel/fully_sharded.h"
#include "trireme/parallel/grad_norm.h"
#include "trireme/parallel/shard.h"

namespace trireme::parallel {

// An optim::Optimizer: the trainer steps, saves and restores it as it does AdamW. Its params()
// are the pieces it updates, "<param>[<begin>:<end>]" (1-D views into the parameters whose
// gradients are the Reducer's shard gradients).
class ZeroOptimizer : public optim::AdamW {
 public:
  // `sharded`: ZeRO-3's parameters of `reducer`'s units (null below stage 3).
  ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options, FullyShardedParams* sharded = nullptr);

  // AdamW on this rank's shard (after reducer.finish()), then all-gather the parameters over dp.
  void step() override;
  // Zeroes the Reducer's gradients in place (Reducer::zero_grad), whatever set_to_none says:
  // under ZeRO-1 the parameters' grads stay views of the buckets.
  void zero_grad(bool set_to_none = true) override;

  // This rank's shard gradients, as pieces for the global norm (dp-sharded; tp-sharded when the
  // parameter is, per `tp_specs`, the model's shard specs; not counted for the parameters named
  // in `counted_elsewhere`, as a pipeline's second copy of a tied weight).
  std::vector<GradPiece> grad_pieces(const std::map<std::string, ShardSpec>& tp_specs = {},
                                     const std::set<std::string>& counted_elsewhere = {}) const;
  // Elements of optimizer state this rank keeps (2 per element it owns): for memory reports.
  int64_t shard_numel() const;

  std::vector<std::pair<std::string, Tensor>> state_dict() const override;
  // Refuses a state written by another dp rank or dp size.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  // Loads this rank's shard from an unsharded AdamW state of the parameters as this process
  // holds them ("step", "lr", "state.<param>.<key>" of tp-shard shape; what an AdamW over the
  // Reducer's parameters saves): a checkpoint of another layout (optimizer_reshard.h).
  void load_unsharded_state_dict(const std::map<std::string, Tensor>& state) override;

 private:
  struct Piece {
    size_t param;
    std::string name;   // "<param>[begin:end]"
    int64_t begin, end; // the parameter's flat elements [begin, end)
    Tensor master;      // 1-D view of the parameter's elements [begin, end), a leaf for AdamW
  };
  static std::vector<Piece> pieces_of(Reducer& reducer, const FullyShardedParams* sharded);
  static optim::NamedParams named(const std::vector<Piece>& pieces);
  ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options, std::vector<Piece> pieces);

  Reducer& reducer_;
  FullyShardedParams* sharded_ = nullptr;  // ZeRO-3
  std::vector<Piece> pieces_;
};

// The gradient pieces the global norm of a step runs over for `optimizer` (grad_norm.h): a
// ZeroOptimizer's shard of them, or the whole gradients of `params` (as the model holds them,
// with its tp shard specs); parameters in counted_elsewhere are left out of the norm.
std::vector<GradPiece> optimizer_grad_pieces(const optim::Optimizer& optimizer, const nn::NamedTensors& params,
                                             const std::map<std::string, ShardSpec>& tp_specs,
                                             const std::set<std::string>& counted_elsewhere = {});

}  // namespace trireme::parallel
