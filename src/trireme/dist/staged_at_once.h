// The staged collectives of a backend without staging (Note [staged reduce-scatter], Note [staged
// all-gather] in process_group.h), with the whole collective issued by a function: ProcessGroup's
// defaults, and the recorded ones of a traced step (recorded_collective.h).
//
//   auto ag = all_gather_at_once(group, out, in, [&](const Tensor& o, const Tensor& i) {
//     return group.all_gather(o, i);
//   });
#pragma once

#include <functional>
#include <memory>

#include "trireme/dist/process_group.h"

namespace trireme::dist {

// Issues the whole collective on (output, input).
using IssueCollective = std::function<WorkPtr(const Tensor& output, const Tensor& input)>;

// The all-gather issued at once (into a buffer of its own when output is undefined); arrived(q)
// is output's chunk q.
std::unique_ptr<StagedAllGather> all_gather_at_once(const ProcessGroup& group, const Tensor& output,
                                                    const Tensor& input, const IssueCollective& all_gather);
// The reduce-scatter issued at finish() or others_sum(); nothing leaves early. `op` as issued.
std::unique_ptr<StagedReduceScatter> reduce_scatter_at_finish(const ProcessGroup& group, const Tensor& output,
                                                              const Tensor& input, ReduceOp op,
                                                              IssueCollective reduce_scatter);

}  // namespace trireme::dist
