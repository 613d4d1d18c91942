// PipelineExecutor: one step of a rank's schedule table over the pp process group (see
// pipeline_executor.h).
#include "trireme/parallel/pipeline_executor.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/engine.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/core/error.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/multi_tensor.h"
#include "trireme/ops/step_scalar.h"
#include "trireme/ops/view.h"
#include "trireme/optim/clip_grad.h"

namespace trireme::parallel {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A one-element tensor's value on the host, from any device.
double host_scalar(const Tensor& t) { return to_device(t.detach(), Device::cpu()).item(); }

// TRIREME_PIPELINE_TRACE=1: every rank prints each action of its steps to stderr as it starts it,
// with the monotonic clock (the same on the ranks of one host), to see where a pipeline stops.
bool trace_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TRIREME_PIPELINE_TRACE");
    return v && std::string(v) == "1";
  }();
  return on;
}

void trace(int rank, int64_t step, const std::string& what) {
  if (!trace_enabled()) return;
  const double t = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  std::fprintf(stderr, "[pipeline trace] %.6f rank %d step %lld: %s\n", t, rank, static_cast<long long>(step),
               what.c_str());
}

}  // namespace

std::string pipeline_messages_out_of_order(const ScheduleTable& table) {
  const int p = int(table.size());
  // A message is (direction, micro-batch, sender's virtual stage); per (sender, receiver): the
  // messages in the order the sender posts its sends, and the receiver its receives.
  using Message = std::tuple<int, int, int>;
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  for (int r = 0; r < p; ++r) {
    for (const Action& a : table[size_t(r)]) {
      const int vs = a.chunk * p + r;
      switch (a.kind) {
        case ActionKind::send_activation: sent[{r, a.peer}].push_back({0, a.micro_batch, vs}); break;
        case ActionKind::send_grad: sent[{r, a.peer}].push_back({1, a.micro_batch, vs}); break;
        case ActionKind::recv_activation: received[{a.peer, r}].push_back({0, a.micro_batch, vs - 1}); break;
        case ActionKind::recv_grad: received[{a.peer, r}].push_back({1, a.micro_batch, vs + 1}); break;
        default: break;
      }
    }
  }
  for (const auto& [pair, messages] : sent) {
    if (received[pair] != messages)
      return str_cat("rank ", pair.first, " sends to rank ", pair.second, " in another order than rank ", pair.second,
                     " receives");
  }
  return "";
}

PipelineExecutor::PipelineExecutor(std::shared_ptr<PipelineModel> stage, dist::ProcessGroup* pp_group,
                                   PipelineOptions options)
    : stage_(std::move(stage)), pp_(pp_group), options_(options) {
  TRIREME_CHECK(stage_ != nullptr, "PipelineExecutor: no stage");
  stages_ = stage_->pipeline().stages;
  rank_ = stage_->pipeline().rank;
  if (stages_ > 1) {
    TRIREME_CHECK(pp_ != nullptr, "PipelineExecutor: ", stages_, " stages need a pipeline process group");
    TRIREME_CHECK(pp_->size() == stages_ && pp_->rank() == rank_, "PipelineExecutor: the stage is rank ", rank_,
                  " of ", stages_, " but the pipeline group is ", pp_->describe_rank(pp_->rank()), " of ",
                  pp_->size());
  }
  const int v = stage_->pipeline().virtual_stages;
  TRIREME_CHECK(v == 1 || options_.schedule == ScheduleKind::interleaved, "PipelineExecutor: a stage with ", v,
                " chunks needs the interleaved schedule, not ", schedule_kind_name(options_.schedule));
  table_ = pipeline_schedule(stages_, options_.micro_batches, options_.schedule, v);
  pipeline_schedule_require(table_, options_.micro_batches, v);
  device_ = stage_->named_parameters().empty() ? Device::cpu() : stage_->named_parameters().front().second.device();
  // Note [pipeline messages in order]
  if (device_.is_cuda() && stages_ > 1) {
    const std::string why = pipeline_messages_out_of_order(table_);
    TRIREME_CHECK(why.empty(), "PipelineExecutor: the ", schedule_kind_name(options_.schedule),
                  " schedule cannot run on GPUs: NCCL matches a rank pair's messages by their order, not their tag, ",
                  "and ", why, "; use the 1f1b or gpipe schedule");
  }
  if (stages_ > 1) connect_peers();
  // Note [pipeline tied embeddings]: the two holders of the tied weight share a group.
  if (stage_->tied_weight().defined() && stages_ > 2)
    tied_group_ = pp_->new_group({0, stages_ - 1}, "pipeline_tied_embedding");
}

PipelineExecutor::PipelineExecutor(std::shared_ptr<PipelineModel> stage, const ParallelContext& ctx)
    : PipelineExecutor(std::move(stage), ctx.pp_group(),
                       PipelineOptions{.micro_batches = ctx.layout().micro_batches,
                                       .schedule = schedule_kind_from_name(ctx.layout().schedule)}) {}

void PipelineExecutor::connect_peers() {
  // Note [pipeline p2p warm-up]. Pairs (low, high) in sorted order: every rank takes its pairs in
  // the same global order, so no two ranks wait on each other in a cycle.
  std::set<std::pair<int, int>> pairs;
  for (int r = 0; r < stages_; ++r)
    for (const Action& a : table_[size_t(r)])
      if (a.kind != ActionKind::forward && a.kind != ActionKind::backward)
        pairs.insert({std::min(r, a.peer), std::max(r, a.peer)});
  for (const auto& [lo, hi] : pairs) {
    if (lo != rank_ && hi != rank_) continue;
    const int other = lo == rank_ ? hi : lo;
    Tensor out = zeros({1}, DType::f32, device_), in = Tensor::empty({1}, DType::f32, device_);
    dist::WorkPtr sent = pp_->send(out, other, {.tag = kWarmupTag});
    dist::WorkPtr received = pp_->recv(in, other, {.tag = kWarmupTag});
    sent->wait();
    received->wait();
  }
}

int PipelineExecutor::tag_of(int direction, int micro_batch, int sender_virtual_stage) const {
  return (sender_virtual_stage * options_.micro_batches + micro_batch) * 2 + direction;
}

double PipelineExecutor::step(const Tensor& ids, const Tensor& targets, int64_t first_row) {
  const auto step_start = Clock::now();
  const Tensor loss_sum = run_schedule(ids, targets, first_row);
  const auto t = Clock::now();
  const double loss = mean_loss(loss_sum);
  stats_.wait += seconds_since(t);
  stats_.total = seconds_since(step_start);
  trace(rank_, steps_ - 1, str_cat("done, loss ", loss));
  return loss;
}

double PipelineExecutor::mean_loss(const Tensor& loss_sum) {
  double loss = host_scalar(loss_sum) / options_.micro_batches;
  if (stages_ > 1) {
    Tensor l = full({1}, loss, DType::f64, device_);  // on the stage's device: NCCL groups take GPU tensors only
    pp_->broadcast(l, {.root = stages_ - 1})->wait();
    loss = host_scalar(l);
  }
  return loss;
}

Tensor PipelineExecutor::run_schedule(const Tensor& ids, const Tensor& targets, int64_t first_row) {
  stats_ = {};
  const int m = options_.micro_batches;
  TRIREME_CHECK(ids.dim() == 2 && targets.sizes() == ids.sizes(), "PipelineExecutor.step: ids ", ids.sizes(),
                " and targets ", targets.sizes(), " must be the same (B, T)");
  const int64_t B = ids.size(0), T = ids.size(1), d = stage_->hidden_size();
  TRIREME_CHECK(B % m == 0, "PipelineExecutor.step: batch ", B, " does not split into ", m, " micro-batches");
  const int64_t b = B / m;
  const DType act_dtype = stage_->activation_dtype();
  TRIREME_CHECK(first_row >= 0, "PipelineExecutor.step: first_row must be >= 0, got ", first_row);
  TRIREME_CHECK(weights_.empty() || int(weights_.size()) == m, "PipelineExecutor.step: ", weights_.size(),
                " micro-batch weights for ", m, " micro-batches");

  // State of one (micro-batch, chunk) between its actions.
  struct Slot {
    Tensor input;         // received activations (a leaf that requires grad), non-first stages
    dist::WorkPtr input_work;
    Tensor output;        // activations or the scaled loss
    Tensor grad;          // received gradient of output
    dist::WorkPtr grad_work;
    Tensor input_grad;    // gradient to send upstream
  };
  std::map<std::pair<int, int>, Slot> slots;
  std::vector<dist::WorkPtr> sends;
  // The micro-batches' losses summed in f64 on the device, in order: the host's double sum of
  // their values, bit for bit, with nothing read on the host (a traced step may hold this).
  Tensor loss_sum = zeros({}, DType::f64, device_);
  dist::ProcessGroup* pp = pp_;

  auto wait = [&](const dist::WorkPtr& work) {
    const auto t = Clock::now();
    work->wait();
    stats_.wait += seconds_since(t);
  };
  const int64_t step = steps_++;

  // Note [autocast cast cache]: under autocast the micro-batches in flight share one cast of each
  // parameter instead of keeping one each.
  autograd::CastCache casts(stage_->parameters());
  // Note [pipeline transfers start alone]: every send and receive below starts when the table
  // posts it, in an NCCL group of its own.
  for (const Action& a : table_[size_t(rank_)]) {
    trace(rank_, step, action_describe(a));
    Slot& s = slots[{a.micro_batch, a.chunk}];
    const int vs = stage_->pipeline().virtual_stage(a.chunk);
    switch (a.kind) {
      case ActionKind::recv_activation:
        s.input = Tensor::empty({b, T, d}, act_dtype, device_);
        s.input_work = dist::record_transfer("recv", {s.input}, /*writes=*/true,
                                             [pp, peer = a.peer, tag = tag_of(0, a.micro_batch, vs - 1)](Tensor* const* x) {
                                               return pp->recv(*x[0], peer, {.tag = tag, .alone = true});
                                             });
        break;
      case ActionKind::recv_grad:
        s.grad = Tensor::empty({b, T, d}, act_dtype, device_);
        s.grad_work = dist::record_transfer("recv", {s.grad}, /*writes=*/true,
                                            [pp, peer = a.peer, tag = tag_of(1, a.micro_batch, vs + 1)](Tensor* const* x) {
                                              return pp->recv(*x[0], peer, {.tag = tag, .alone = true});
                                            });
        break;
      case ActionKind::forward: {
        Tensor input;
        if (stage_->pipeline().is_first(a.chunk)) {
          input = narrow(ids, 0, a.micro_batch * b, b);
        } else {
          wait(s.input_work);
          s.input.set_requires_grad(true);
          input = s.input;
        }
        const auto t = Clock::now();
        // Note [dropout keyed by global sample]: this micro-batch's rows of the global batch.
        nn::GlobalRowScope rows(first_row + a.micro_batch * b);
        Tensor out = stage_->forward_chunk(a.chunk, input);
        if (stage_->pipeline().is_last(a.chunk)) {
          Tensor loss = stage_->loss_of(out, narrow(targets, 0, a.micro_batch * b, b));
          if (!weights_.empty()) {  // read again by every replay of a traced step (set_micro_batch_weights)
            // A replay with no weights set multiplies by 1: the bits of an unweighted step.
            loss = mul_step_scalar(loss, [this, mb = size_t(a.micro_batch)] { return mb < weights_.size() ? weights_[mb] : 1.0; });
          }
          {
            NoGradGuard no_grad;
            loss_sum = add(loss_sum, to_dtype(loss.detach(), DType::f64));
          }
          // Every micro-batch weighs 1/m of the batch's mean (x the f16 loss scale, which a traced
          // step takes as an argument refreshed before each replay).
          out = mul_step_scalar(loss, [this, m] { return loss_scale_ / m; });
        }
        s.output = out;
        stats_.compute += seconds_since(t);
        break;
      }
      case ActionKind::send_activation:
        sends.push_back(send(contiguous(s.output.detach()), a.peer, tag_of(0, a.micro_batch, vs)));
        break;
      case ActionKind::backward: {
        if (!stage_->pipeline().is_last(a.chunk)) wait(s.grad_work);
        const auto t = Clock::now();
        if (stage_->pipeline().is_last(a.chunk)) {
          autograd::backward({s.output});
        } else {
          autograd::backward({s.output}, {s.grad});
        }
        if (!stage_->pipeline().is_first(a.chunk)) {
          TRIREME_CHECK(s.input.grad().defined(), "PipelineExecutor: virtual stage ", vs,
                        " produced no gradient for its input of micro-batch ", a.micro_batch);
          s.input_grad = contiguous(s.input.grad());
        }
        s.output = Tensor();  // the graph is spent; free what it held
        s.grad = Tensor();
        stats_.compute += seconds_since(t);
        break;
      }
      case ActionKind::send_grad:
        sends.push_back(send(s.input_grad, a.peer, tag_of(1, a.micro_batch, vs)));
        break;
    }
  }
  trace(rank_, step, "waits for its sends");
  for (const auto& w : sends) wait(w);

  trace(rank_, step, "end-of-step reductions (tied embedding, loss)");
  const auto t = Clock::now();
  if (Tensor tied = stage_->tied_weight(); tied.defined()) {
    // Note [pipeline tied embeddings]. A copy with no gradient (no use reached it) adds zeros.
    if (!tied.grad().defined()) tied.set_grad(zeros_like(tied));
    dist::ProcessGroup* group = tied_group_ ? tied_group_.get() : pp_;
    dist::record_collective("all_reduce", {tied.grad()}, [group](Tensor* const* x) { return group->all_reduce(*x[0]); })
        ->wait();
  }
  stats_.wait += seconds_since(t);
  return loss_sum;
}

dist::WorkPtr PipelineExecutor::send(const Tensor& tensor, int peer, int tag) {
  return dist::record_transfer("send", {tensor}, /*writes=*/false, [pp = pp_, peer, tag](Tensor* const* x) {
    return pp->send(*x[0], peer, {.tag = tag, .alone = true});
  });
}

double PipelineExecutor::grad_norm() {
  // Each element once: tp shards summed over tp, tp-replicated parameters counted by tp rank 0,
  // stages summed over pp, the tied weight counted by rank 0 only.
  const TpGroup& tp = stage_->tp();
  std::vector<Tensor> replicated, sharded;
  Tensor tied = stage_->tied_weight();
  for (auto& [name, p] : stage_->named_parameters()) {
    // The tied weight's summed gradient lives on rank 0 and the last rank: count it once.
    if (tied.defined() && rank_ == stages_ - 1 && p.impl() == tied.impl()) continue;
    (stage_->shard_specs().count(name) ? sharded : replicated).push_back(p);
  }
  if (tp.size == 1 && stages_ == 1) {
    replicated.insert(replicated.end(), sharded.begin(), sharded.end());  // size-1 shards are whole
    return optim::grad_norm(replicated);
  }
  auto squared = [](const std::vector<Tensor>& ps) {
    const double n = ps.empty() ? 0.0 : optim::grad_norm(ps);
    return n * n;
  };
  Tensor sq = full({1}, (tp.rank == 0 ? squared(replicated) : 0.0) + squared(sharded), DType::f64, device_);
  if (tp.size > 1) tp.group->all_reduce(sq)->wait();
  if (stages_ > 1) pp_->all_reduce(sq)->wait();
  return std::sqrt(host_scalar(sq));
}

double PipelineExecutor::clip_grad_norm(double max_norm) {
  TRIREME_CHECK(max_norm > 0, "PipelineExecutor.clip_grad_norm: max_norm must be positive, got ", max_norm);
  const double norm = grad_norm();
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    std::vector<Tensor> grads;
    for (auto& [name, p] : stage_->named_parameters()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    mul_all_(grads, coef);
  }
  return norm;
}

}  // namespace trireme::parallel
