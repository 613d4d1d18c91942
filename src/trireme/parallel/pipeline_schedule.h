// Pipeline schedules as data: one list of actions per pipeline rank, generated from (stages,
// micro-batches, kind), and a checker that proves a set of lists runs to the end.
//
//   auto table = pipeline_schedule(4, 8, ScheduleKind::one_f_one_b);   // table[rank] = actions
//   pipeline_schedule_require(table, 8);        // throws naming the rank and action if broken
//   for (const Action& a : table[my_rank]) ...  // what PipelineExecutor runs
//   pipeline_bubble_fraction(4, 8);             // (p - 1) / (m + p - 1) = 3/11
//
// Virtual stages. With `virtual_stages` v > 1 (interleaved 1F1B) the model is cut into p * v
// pieces; rank r runs the pieces ("chunks") c = 0..v-1 whose virtual stage is c * p + r, so an
// activation leaving the last rank goes back to rank 0's next chunk. With v = 1 the chunk is
// always 0 and the virtual stage is the rank.
//
// Note [pipeline communication order]
// The generators fix each rank's order of computations (GPipe, 1F1B, interleaved 1F1B) and then
// place the sends and receives by simulating the pipeline with forward = 1 and backward = 2
// time units: a transfer happens when its producer finishes, and every rank's sends and
// receives appear in the order of one global sequence of transfers. Such tables cannot deadlock
// even when a send blocks until its receive is posted (NCCL's semantics for large messages), so
// they also run under Gloo's, where a send is posted without blocking. The checker simulates the
// stricter of the two by default (CommSemantics::rendezvous).
#pragma once

#include <string>
#include <vector>

namespace trireme::parallel {

enum class ScheduleKind {
  gpipe,        // all forwards, then all backwards: m activations live per rank
  one_f_one_b,  // 1F1B (PipeDream-flush): warm-up, steady one-forward-one-backward, cool-down
  interleaved,  // interleaved 1F1B (Megatron): v chunks per rank, a bubble v times smaller
};
// "gpipe" | "1f1b" | "interleaved" (ParallelLayout::schedule); throws on anything else.
ScheduleKind schedule_kind_from_name(const std::string& name);
const char* schedule_kind_name(ScheduleKind kind);

enum class ActionKind { forward, backward, send_activation, recv_activation, send_grad, recv_grad };
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind;
  int micro_batch;
  int chunk = 0;  // the model chunk on this rank (virtual stage = chunk * stages + rank)
  int peer = -1;  // the other pipeline rank of a send/recv; -1 for forward/backward
  bool operator==(const Action&) const = default;
};
// "send_activation(mb 3, chunk 0) to rank 2", for errors and logs.
std::string action_describe(const Action& action);

using ScheduleTable = std::vector<std::vector<Action>>;  // [pipeline rank][step]

// The action lists of every rank. 1F1B has num_warmup = min(stages - rank - 1, micro_batches)
// forwards before its first backward (Megatron's schedules.py); interleaved needs
// micro_batches % stages == 0 and stages >= 2 when virtual_stages > 1.
ScheduleTable pipeline_schedule(int stages, int micro_batches, ScheduleKind kind, int virtual_stages = 1);

// Just the forward/backward order of one rank (no communication), as the kind defines it.
std::vector<Action> pipeline_compute_order(int stages, int rank, int micro_batches, ScheduleKind kind,
                                           int virtual_stages = 1);

// The number of forwards rank `rank` runs before its first backward.
int pipeline_warmup_count(int stages, int rank, int micro_batches, ScheduleKind kind, int virtual_stages = 1);

enum class CommSemantics {
  rendezvous,  // a send and its receive complete together, in each rank's order (NCCL-like)
  eager,       // a send is posted and the rank moves on; a receive waits for its send (Gloo)
};

// Proves, without running anything, that the table is a complete and runnable schedule:
// every send has a receive on its peer with the same (micro-batch, chunk, kind) and vice versa;
// every rank runs the forward and backward of every (micro-batch, chunk) exactly once, the
// forward first; data arrives before it is used (a receive precedes the computation that needs
// it, a send follows the computation that produced it, peers are the neighbouring stages); and
// simulating all ranks under `semantics` ends with every rank done (no deadlock).
// Returns "" when all of that holds, otherwise an error naming the rank and the action.
std::string pipeline_schedule_check(const ScheduleTable& table, int micro_batches, int virtual_stages = 1,
                                    CommSemantics semantics = CommSemantics::rendezvous);
// pipeline_schedule_check, throwing trireme::Error with its message.
void pipeline_schedule_require(const ScheduleTable& table, int micro_batches, int virtual_stages = 1,
                               CommSemantics semantics = CommSemantics::rendezvous);

// (p - 1) / (v m + p - 1): the idle fraction of an ideal pipeline of p equal stages with m
// micro-batches (v chunks per rank for interleaved), communication taking no time.
double pipeline_bubble_fraction(int stages, int micro_batches, int virtual_stages = 1);

// Per rank, the most (micro-batch, chunk) forwards whose backward has not yet run: the
// activations the rank holds at its peak. 1F1B: min(stages - rank, m) <= stages; GPipe: m.
std::vector<int> pipeline_peak_activations(const ScheduleTable& table);

// The table run with fixed costs (sends eager, communication free): the time it takes and each
// rank's idle fraction. With forward_cost : backward_cost the same on every rank, the idle
// fraction of GPipe and 1F1B is the bubble fraction above.
struct ScheduleTiming {
  double makespan = 0;
  std::vector<double> idle_fraction;  // per rank: 1 - busy / makespan
};
ScheduleTiming pipeline_schedule_timing(const ScheduleTable& table, double forward_cost = 1.0,
                                        double backward_cost = 2.0);

}  // namespace trireme::parallel
