// PipelineExecutor: runs this rank's schedule table for one optimizer step, moving activations
// and gradients through the pipeline process group.
//
//   auto stage = std::make_shared<models::GPT>(cfg, ctx, seed);  // this rank's stage (a PipelineModel)
//   PipelineExecutor pipe(stage, ctx);                       // pp group, micro-batches, schedule
//   optim::AdamW opt(stage->named_parameters(), {.lr = 3e-4});
//   for (...) {
//     opt.zero_grad();
//     double loss = pipe.step(ids, targets);   // (B, T) each: the batch of this data-parallel rank
//     pipe.clip_grad_norm(1.0);                 // optional: the norm over every stage
//     opt.step();
//   }
//
// step() splits the batch into m micro-batches of B / m rows, runs forward and backward of each
// as the table says (the last stage scales each micro-batch's mean loss by 1/m, so the
// accumulated gradients are those of the whole batch's mean loss when every target counts), sums
// the tied embedding's gradient between the first and last stage (Note [pipeline tied
// embeddings] in models/gpt.h), and returns the batch's mean loss on every pipeline rank. A stage
// with tensor parallelism runs the same table on each of its tp ranks, each paired through its
// own pipeline group with the same tp rank of the other stages; what crosses between stages is
// the (b, T, d) activation, replicated over tp.
//
// Communication uses only ProcessGroup send/recv/all_reduce/broadcast: a send is posted when the
// table says and waited for at the end of the step; a receive is posted when the table says and
// waited for just before the computation that needs it. Tags name the message: (sender's virtual
// stage, micro-batch, direction), unique within a step. Buffers, and the scalars reduced over
// the group (loss, norm), live on the stage's device (its parameters'), so the same code runs
// over Gloo on the CPU and over NCCL on GPUs. TRIREME_PIPELINE_TRACE=1 makes every rank print
// each action to stderr as it starts it, with a clock the ranks of one host share.
//
// Note [pipeline messages in order]
// NCCL ignores tags: it pairs the sends from rank a to rank b with b's receives from a in the
// order each side posts them. A table can run over NCCL only when, for every rank pair, the
// sender posts its messages in the order the receiver posts the receives. The GPipe, 1F1B and
// interleaved tables do (tests/dist/dropout_rows_test.cpp checks p 2..4 and many m); the
// constructor checks it for a stage on a GPU and refuses a table that does not, naming the pair.
//
// Note [pipeline transfers start alone]
// Every send and receive of a step starts when the table posts it, in an NCCL group of its own
// (SendRecvOptions::alone). Left to the NCCL group's queue (Note [nccl send/recv]), they started
// in groups shaped by each rank's waits: under GPipe, rank 0 started {activations 0..3, gradient
// 0} as one group, where NCCL pairs activation 0 with gradient 0 and runs activation 1 only after
// that pair is done; rank 1 sends gradient 0 only after its forwards, which wait for activation
// 1. Both GPUs hung in the first training step (2 H200s, 2026-11-30; the step-0 evaluation, one
// transfer per group, ran). Started alone and in table order, a rank's transfers are a
// subsequence of the table's one global sequence of transfers (Note [pipeline communication
// order]), so no two of them wait on each other in a cycle, whatever the host blocks on between
// them (a loss read back, a copy to the GPU). Since then pp=2 (GPipe, 1F1B) runs on 2 GPUs with
// the one-GPU losses (tests/cuda/parallel_trainer_test.cpp).
//
// Note [pipeline p2p warm-up]
// NCCL connects two ranks for point-to-point lazily, on the host, the first time a group of
// transfers between them starts, and that setup waits for the peer to set up the same
// connection. The constructor exchanges one element each way with every peer the table talks
// to, both directions in one group on both ranks, so that the connections exist before the first
// step (whose transfers, started alone in table order, would also connect, one direction at a
// time, inside the step). On the CPU (Gloo) it is a harmless ping.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trireme/dist/process_group.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/pipeline_schedule.h"
#include "trireme/parallel/pipeline_model.h"

namespace trireme::parallel {

struct PipelineOptions {
  int micro_batches = 1;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
};

// Where one step's time went on this rank (seconds).
struct PipelineStepStats {
  double total = 0;    // the whole step()
  double compute = 0;  // forward and backward computations
  double wait = 0;     // blocked on receives, sends, and the end-of-step reductions
};

// Note [pipeline messages in order]: "" when every rank pair of `table` posts its receives in the
// order of the sends, else a sentence naming a pair that does not.
std::string pipeline_messages_out_of_order(const ScheduleTable& table);

class PipelineExecutor {
 public:
  // pp_group: the stage's pipeline group (rank i holds stage i); may be null for one stage.
  PipelineExecutor(std::shared_ptr<PipelineModel> stage, dist::ProcessGroup* pp_group, PipelineOptions options);
  // From ctx: its pp group, layout().micro_batches and layout().schedule.
  PipelineExecutor(std::shared_ptr<PipelineModel> stage, const ParallelContext& ctx);

  // One step's forwards and backwards; accumulates into the stage parameters' .grad. Returns the
  // mean loss over the batch (the last stage's, broadcast to every pipeline rank). first_row: the
  // row of the step's global batch that ids' row 0 is (a dp rank's slice starts at
  // dp_rank x B); each micro-batch's forward runs in a GlobalRowScope of its global rows, so
  // dropout draws the single process's masks (Note [dropout keyed by global sample]).
  // Each micro-batch's mean loss is multiplied by its weight (set_micro_batch_weights).
  double step(const Tensor& ids, const Tensor& targets, int64_t first_row = 0);

  // step() in two parts. run_schedule: the forwards, backwards, transfers and the tied weight's
  // sum, with nothing read on the host, so that a traced step can hold it (train.mode =
  // "static": its transfers and sums are recorded, dist/recorded_collective.h); returns the sum
  // of the micro-batches' weighted losses as an f64 scalar on the stage's device (0 but on the
  // last stage). mean_loss: that sum over the micro-batches, from the last stage to every
  // pipeline rank (every rank calls it together).
  Tensor run_schedule(const Tensor& ids, const Tensor& targets, int64_t first_row = 0);
  double mean_loss(const Tensor& loss_sum);

  // The global L2 norm of the gradients over every stage and tp rank (each element once: tp
  // shards summed over tp, tp-replicated parameters counted by tp rank 0, the tied weight
  // counted once), and
  // clip_grad_norm scales them by max_norm / (norm + 1e-6) when it exceeds max_norm. Every
  // pipeline and tp rank calls them together.
  double grad_norm();
  double clip_grad_norm(double max_norm);

  // Multiplies the loss that backward starts from (the f16 loss scale, amp/grad_scaler.h); the
  // returned loss stays unscaled.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // One weight per micro-batch (or none: all 1) multiplying each micro-batch's mean loss: packed
  // SFT batches weigh a micro-batch by its share of the batch's counted targets. Set before each
  // step; like the loss scale, every replay of a traced step reads the weights set then.
  void set_micro_batch_weights(std::vector<double> weights) { weights_ = std::move(weights); }

  const ScheduleTable& table() const { return table_; }
  const std::vector<Action>& actions() const { return table_[size_t(rank_)]; }
  const PipelineStepStats& last_stats() const { return stats_; }
  PipelineModel& stage() { return *stage_; }

 private:
  int tag_of(int direction, int micro_batch, int sender_virtual_stage) const;
  dist::WorkPtr send(const Tensor& tensor, int peer, int tag);
  // Note [pipeline p2p warm-up]: one message each way between every pair of ranks the table connects.
  void connect_peers();
  static constexpr int kWarmupTag = (1 << 30) + 1;  // above every step tag (and the runner's eval tags)

  std::shared_ptr<PipelineModel> stage_;
  dist::ProcessGroup* pp_;
  PipelineOptions options_;
  int rank_ = 0, stages_ = 1;
  ScheduleTable table_;
  Device device_ = Device::cpu();  // the stage's parameters'
  std::shared_ptr<dist::ProcessGroup> tied_group_;  // first and last rank, when p > 2
  PipelineStepStats stats_;
  double loss_scale_ = 1.0;
  std::vector<double> weights_;  // set_micro_batch_weights
  int64_t steps_ = 0;  // step() calls so far (TRIREME_PIPELINE_TRACE names them)
};

}  // namespace trireme::parallel
