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
#include <memory>
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

// A staged all-gather or reduce-scatter of `group` (Note [staged all-gather], Note [staged
// reduce-scatter] in dist/process_group.h) inside a traced step: while a trace records on this
// thread, the collective runs whole, as on a backend without staging (the all-gather at once, the
// reduce-scatter at finish() or others_sum()), and is one node of the step, so that a replay
// issues it again on the replay's tensors where the traced step did; what the caller does with
// the arrivals and chunks (its GEMMs, keep_others' copies, the zeroed own chunk of others_sum)
// are kernel calls around it. Over a backend without staging (Gloo) that is what the eager step
// runs; elsewhere the values are those the staged ops promise (all_gather's and reduce_scatter's).
// Without a trace these are group.all_gather_staged and group.reduce_scatter_staged.
std::unique_ptr<StagedAllGather> record_all_gather_staged(ProcessGroup& group, const Tensor& output,
                                                          const Tensor& input);
std::unique_ptr<StagedReduceScatter> record_reduce_scatter_staged(ProcessGroup& group, const Tensor& output,
                                                                  const Tensor& input);

// t's storage gives its memory back (Note [released storage] in core/storage.h) as one call of a
// traced step, which a replay makes again where the traced step did: ZeRO-3's release of a unit's
// gathered parameters. The call is pinned (no call moves across it), and the collective that fills
// the storage again reacquires it inside its own node (record_collective's `issue`), so that the
// memory exists exactly where the traced step had it. Without a trace: t.storage()->release().
void record_release(const Tensor& t);

}  // namespace trireme::dist
