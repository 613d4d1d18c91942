// Multi-tensor AdamW: a pass merging a graph's AdamW updates (one kernel call per parameter) into
// calls of the multi-tensor kernel (kernels/optim.h: adamw_multi), one launch updating many
// parameters. See docs/STATIC_GRAPH.md, "Passes".
#pragma once

#include "trireme/graph/graph.h"

namespace trireme::graph {

// Merges runs of `adamw` calls of one device and dtype into one `adamw_multi` call each. The
// merged call takes the place of the run's last member, so each earlier member moves down to it;
// a member joins a run only when that move is legal and costs no memory: no call it crosses
//   - touches a buffer the run touches where either writes (the update reads the gradient and
//     writes the parameter and both moments: a call reading a parameter, or writing a gradient,
//     in between ends the run),
//   - is pinned (a pipeline transfer's post or wait),
//   - or, when a member is the last use of an intermediate buffer (a gradient that dies at its
//     update), takes memory: the first use of an intermediate buffer. Crossing only calls that
//     take none, the gradient living until the merged call raises no peak.
// Members write disjoint elements (two updates of views into one buffer may merge when their
// ranges do not overlap). The merged call refreshes each member's hyper-parameters with the
// member's own refresh (learning rate, bias corrections, its group's weight decay) before every
// replay, then runs every update in one call; each element gets the operations adamw gives it,
// so the results are the same bits. A call of a dtype or device without the kernel, or one with
// other per-replay bindings, stays as it is; so does a run of one.
Graph merge_adamw(const Graph& g);

}  // namespace trireme::graph
