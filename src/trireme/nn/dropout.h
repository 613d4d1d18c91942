// Dropout: zeroes elements with probability p in training mode and scales the rest by 1/(1-p);
// the identity in eval mode or when p == 0. And GlobalRowScope, which tells it where the rows
// of the current forward sit in the step's global batch.
//
// Note [dropout keyed by global sample]
// A mask element is a pure function of (seed, stream, index) (core/rng.h). The stream comes from
// the layer's qualified name and its call counter (Module::set_rng(seed, step) from the trainer,
// so the counter is the step); the index is the element's row-major position in the step's
// GLOBAL batch: the input's first dimension is the batch, and a forward over rows
// [r, r + b) of the global batch (a data-parallel slice, a pipeline or accumulation
// micro-batch) draws indices from r x (elements per row) on. The runner that splits the batch
// says r with a GlobalRowScope around each micro-batch's forward, and every forward inside one
// scope draws with the counter the layer had when the scope opened (the counter does not
// advance inside a scope), so the m micro-batches of a step draw with the same stream. Together
// each sample gets the mask it gets in one process's forward over the whole batch, whatever the
// layout: dp, micro-batches, pipeline stages (each stage holds whole layers and sees the same
// rows), and tp (dropout sits on replicated tensors; tp_dropout draws a shard's columns of the
// full mask). Outside any scope the offset is 0 and each call advances the counter, as a single
// process's one forward per step needs.
//
// Why a thread-local scope and not a ParallelContext member or a forward argument: the row
// offset is a property of the one forward call running on this thread, not of the run's
// layout (the context) or of the model (one model runs several micro-batches per step); passing
// it as an argument would thread it through every layer's forward signature for the sake of
// the one layer that draws. The scope is RAII, nests (restoring the outer value), and is
// per thread, so forwards on other threads (tests running ranks as threads) do not see it.
//
//   nn::Dropout drop(0.1);
//   model.set_rng(seed, step);    // once per step, from the trainer
//   {
//     nn::GlobalRowScope rows(dp_rank * local_batch + micro * micro_rows);
//     Tensor y = drop.forward(x);   // x: (micro_rows, ...) rows of the global batch
//   }
#pragma once

#include <cstdint>
#include <optional>

#include "trireme/nn/module.h"

namespace trireme::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x);
  // forward returns its input unchanged (p == 0, or evaluating): a caller may skip it.
  bool is_identity() const { return !is_training() || p == 0.0; }

  double p;
};

// The stream of a named layer's `counter`-th draw: the name's hash mixed with the counter.
uint64_t dropout_stream(const std::string& qualified_name, uint64_t counter);

// In a traced step (graph/trace.h; a no-op otherwise): `module`'s draw of the forward being
// recorded, taken with `counter` (advancing the module's counter when `advances`, as a draw
// outside a GlobalRowScope does), drew from `stream`; each replay takes the counter the same way
// and recomputes the stream of the recorded masks (forward and backward), so masks differ per step.
// Every layer that draws from dropout_stream calls it (nn::Dropout, LoRA's adapters).
void bind_dropout_stream(Module& module, uint64_t counter, bool advances, uint64_t stream);

// While alive (a checkpointed region's replay inside the backward, nn/checkpoint.h), draws on
// this thread redraw the first run's masks: their streams are bound already (a binding covers
// every recorded call that took the stream's value), so bind_dropout_stream adds nothing, and in
// particular no second counter advance per replay.
class RedrawScope {
 public:
  RedrawScope();
  ~RedrawScope();
  RedrawScope(const RedrawScope&) = delete;
  RedrawScope& operator=(const RedrawScope&) = delete;
  static bool active();

 private:
  bool previous_;
};

// While alive, forwards on this thread compute rows [first_row, ...) of the step's global batch
// (Note [dropout keyed by global sample]).
class GlobalRowScope {
 public:
  explicit GlobalRowScope(int64_t first_row);
  ~GlobalRowScope();
  GlobalRowScope(const GlobalRowScope&) = delete;
  GlobalRowScope& operator=(const GlobalRowScope&) = delete;

  // The innermost scope's first row on this thread, or nullopt outside any scope.
  static std::optional<int64_t> current();

 private:
  std::optional<int64_t> previous_;
};

}  // namespace trireme::nn
