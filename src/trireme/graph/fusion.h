// Elementwise fusion: a pass from graph to graph (graph/passes.h) that replaces chains of
// pointwise kernel calls (unary, binary, copy: kernels/elementwise.h) over one shape by one call
// of a fused kernel (kernels/fused.h) that computes the chain element by element. The chain's
// internal intermediates (buffers written and read only inside it) are no longer touched, so the
// memory plan drops them; each element is computed as the unfused kernels compute it, so the
// results are the same bits. See docs/STATIC_GRAPH.md, Passes.
#pragma once

#include "trireme/graph/graph.h"
#include "trireme/kernels/fused.h"

namespace trireme::graph {

// Groups pointwise calls on one device whose outputs have one shape (inputs broadcast to it with
// stride 0, or any other view of it), linked by intermediate buffers that only the group reads,
// and that can all move down to the group's last call without crossing a call that touches what
// they touch. Calls with host arguments recomputed per replay and pinned calls stay as they are.
// Each group becomes one call at the place of its last member; a group whose kernel cannot be
// prepared on its device (a CUDA compile failure) stays unfused, with one line on stderr.
Graph fuse_elementwise(const Graph& g);

// The program of a fused call, or null for any other call.
const FusedProgram* fused_program(const Node& n);

}  // namespace trireme::graph
