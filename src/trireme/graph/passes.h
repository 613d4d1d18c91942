// Passes: each a function from graph to graph (or, for the memory plan, to a plan of it), so that
// each can be tested and shown on its own (`trireme graph`).
#pragma once

#include <cstdint>
#include <vector>

#include "trireme/graph/graph.h"

namespace trireme::graph {

// Per buffer: the first and the last node that touches it (-1 for both when none does): the
// liveness every reordering and planning pass starts from.
struct BufferSpans {
  std::vector<int> first, last;
};
BufferSpans buffer_spans(const Graph& g);

// Drops the kernel calls whose results nothing observes: a call is kept when it writes a buffer
// that outlives the step (an input, captured or output buffer) or one a kept call
// reads later. Buffers count as a whole: a write into part of a needed buffer is kept.
Graph eliminate_dead_code(const Graph& g);

// Merges a kernel call into an earlier identical one: same kernel and host arguments, same input
// values in the same state (no write to them in between), and both pure: every output is a
// whole intermediate buffer that only this call writes, and no argument is recomputed per replay.
// Later uses of the merged call's outputs read the earlier call's. A call recorded in a
// recomputation's replay (Node::recomputed) is never merged: recomputing is what was asked for.
Graph eliminate_common_subexpressions(const Graph& g);

// Moves each call that frees memory without taking any (it is the last use of an intermediate
// buffer and writes no buffer it is the first to touch: an optimizer update reading its gradient)
// to just after the last earlier call it depends on: one touching a buffer it touches, where
// either writes. The same kernels run on the same values, so results are the same bits; the freed
// buffers die sooner (without clipping, each gradient right after its last accumulation).
Graph schedule_for_memory(const Graph& g);

// Liveness of every intermediate buffer (first to last call that touches it) and its offset in
// one arena, so that two buffers live at once never overlap, except an elementwise call's output
// taking over the bytes of an input that dies there. Greedy placement in a few orders (by size,
// by size times lifetime, by first use; first or best fit), the smallest arena kept.
struct MemoryPlan {
  std::vector<int64_t> offset;       // per buffer: bytes into the arena, -1 if not in it
  std::vector<int> first, last;      // per buffer: the first and last node touching it, -1 if none
  // per buffer: the buffer whose bytes it takes over at its first node, an elementwise call that
  // is that buffer's last use (Note [in-place reuse], passes.cpp); -1 if none
  std::vector<int> reuses;
  size_t arena_bytes = 0;
  size_t intermediate_bytes = 0;     // the planned buffers' sizes summed (what no reuse would take)
  int64_t planned_buffers = 0;
};
MemoryPlan plan_memory(const Graph& g, size_t alignment = 16);

// The pairs of planned buffers that are live at once and overlap in the arena, other than an
// in-place takeover at its one shared call (empty for a plan from plan_memory): the check a test
// runs over every pair.
std::vector<std::pair<int, int>> plan_conflicts(const Graph& g, const MemoryPlan& plan);

}  // namespace trireme::graph
