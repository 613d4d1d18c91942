// A collective as one call of a traced step (graph/trace.h, kernels/kernel_tape.h): while a trace
// records on this thread, the collective is recorded as a node that writes `tensors`, and a replay
// issues it again on the replay's tensors and waits for it. The values are the same as eager's
// (the same collective on the same data); in a replay the collective does not overlap the calls
// after it. Without a trace this is `issue` on `tensors`.
//
//   WorkPtr w = dist::record_collective("all_reduce", {bucket}, [dp](Tensor* const* t) {
//     return dp->all_reduce(*t[0], {.op = ReduceOp::avg});
//   });
#pragma once

#include <functional>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/dist/process_group.h"

namespace trireme::dist {

WorkPtr record_collective(const char* op, const std::vector<Tensor>& tensors,
                          std::function<WorkPtr(Tensor* const* tensors)> issue);

// A send or receive as two calls of a traced step: one that issues it where the caller issues it
// and one, recorded when the caller waits for the returned work, that waits for it there. A replay
// then issues and waits where the traced step did, so the transfers overlap the calls between as
// they did eagerly, and a schedule whose ranks wait in a fixed order cannot deadlock on a wait
// moved earlier. `writes`: the transfer writes `tensors` (a receive) rather than reads them (a
// send, which the graph keeps although no call reads what it produces). Both nodes are pinned:
// scheduling for memory moves no call across them. Without a trace this is `issue` on `tensors`.
WorkPtr record_transfer(const char* op, const std::vector<Tensor>& tensors, bool writes,
                        std::function<WorkPtr(Tensor* const* tensors)> issue);

}  // namespace trireme::dist
