// Reducer: bucketed, hook-driven, overlapped gradient averaging over the data-parallel group.
#include "trireme/parallel/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/recorded_collective.h"
#ifdef TRIREME_WITH_CUDA
#include "trireme/cuda/device.h"
#endif
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/shard.h"

namespace trireme::parallel {

std::vector<BucketLayout> assign_buckets(const std::vector<std::pair<int64_t, DType>>& params, int64_t bucket_bytes,
                                         int64_t pad_to, const std::vector<std::vector<size_t>>& units) {
  TRIREME_CHECK(bucket_bytes > 0 && pad_to >= 1, "assign_buckets: bucket_bytes (", bucket_bytes,
                ") and pad_to (", pad_to, ") must be positive");
  std::vector<int> unit_of(params.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    TRIREME_CHECK(!units[u].empty(), "assign_buckets: unit ", u, " has no parameters");
    for (size_t k : units[u]) {
      TRIREME_CHECK(k < params.size() && unit_of[k] < 0, "assign_buckets: parameter ", k,
                    " is out of range or in two units");
      TRIREME_CHECK(params[k].second == params[units[u][0]].second, "assign_buckets: unit ", u, " mixes dtypes");
      unit_of[k] = int(u);
    }
  }
  std::vector<BucketLayout> out;
  BucketLayout cur;
  auto close = [&](BucketLayout& b) {
    if (b.slots.empty()) return;
    b.numel = round_up(b.numel, pad_to);
    out.push_back(std::move(b));
    b = BucketLayout();
  };
  std::vector<char> placed(units.size(), 0);
  for (size_t k = params.size(); k-- > 0;) {
    if (const int u = unit_of[k]; u >= 0) {
      if (placed[size_t(u)]) continue;
      placed[size_t(u)] = 1;
      close(cur);
      // The whole unit, its parameters in reverse registration order like every bucket's.
      std::vector<size_t> members = units[size_t(u)];
      std::sort(members.rbegin(), members.rend());
      BucketLayout unit{.dtype = params[members[0]].second, .unit = u};
      for (size_t m : members) {
        unit.slots.push_back({m, unit.numel, params[m].first});
        unit.numel += params[m].first;
      }
      close(unit);
      continue;
    }
    const auto [numel, dtype] = params[k];
    const int64_t bytes = numel * int64_t(dtype_size(dtype));
    const int64_t cur_bytes = cur.numel * int64_t(dtype_size(cur.dtype));
    if (!cur.slots.empty() && (dtype != cur.dtype || cur_bytes + bytes > bucket_bytes)) close(cur);
    if (cur.slots.empty()) cur.dtype = dtype;
    cur.slots.push_back({k, cur.numel, numel});
    cur.numel += numel;
  }
  close(cur);
  return out;
}

using Clock = std::chrono::steady_clock;

// Note [ZeRO-2 buckets]
// Under ZeRO-2/3 a bucket is allocated (zeroed) when its first gradient of a backward arrives;
// each arriving gradient is copied into it and dropped from its parameter, so a parameter never
// holds a gradient past its own arrival. Once the bucket is complete it is reduce-scattered:
// straight into this rank's shard gradient when that holds nothing of this step yet, else into
// a scratch shard that is added to it. The bucket (and scratch) are dropped once the collective
// has finished, checked at every launch (which waits while two are still in flight) and at
// finish(). The gradients in memory at any time are thus the shards (1/dp) plus the bucket being
// filled and at most two in flight. Every backward
// reduces, micro-batches included (more traffic than ZeRO-1's one reduction per step: the price
// of never holding whole gradients).

struct Reducer::State {
  std::vector<BucketLayout> layout;
  std::vector<Tensor> buffers;       // one flat gradient buffer per bucket (ZeRO-2/3: while in use)
  std::vector<Tensor> shard_grads;   // ZeRO: this rank's chunk of each bucket, averaged
  std::vector<Tensor> scratch;       // ZeRO-2/3: a reduce-scatter's output to add to the shard
  std::vector<char> shard_fresh;     // ZeRO-2/3: the shard holds nothing of this step yet
  std::vector<std::pair<size_t, size_t>> where;  // per parameter: (bucket, slot)
  std::vector<Tensor> params;
  dist::ProcessGroup* dp = nullptr;
  int zero = 0;
  bool overlap = true;
  int cuda_device = -1;  // the parameters' GPU, or -1 on the CPU

  // The current backward pass.
  bool sync = false;
  bool open = false;              // a reducing pass has begun and finish() has not ended it
  std::vector<char> arrived;      // per parameter
  std::vector<size_t> remaining;  // per bucket: gradients still to arrive
  size_t next_launch = 0;
  std::vector<dist::WorkPtr> works;  // in flight; ZeRO-2/3 drops each once finished
  std::vector<char> launched_now;    // per bucket: launched with a collective in this pass
  std::vector<Clock::time_point> launched, done;

  // The completion watcher: waits on each launched bucket to time when it finished.
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::pair<size_t, dist::WorkPtr>> queue;
  size_t finished = 0;  // buckets the watcher has seen complete this pass
  bool stop = false;
  std::thread watcher;

  ReducerStats stats;
  // A pass whose timing is still to be summed (Note [reducer stats on the GPU]).
  bool timing_pending = false;
  Clock::time_point pending_backward_end;

  bool communicating() const { return dp != nullptr && dp->size() > 1; }
  bool frees_buckets() const { return zero >= 2; }
  int dp_size() const { return dp ? dp->size() : 1; }

  // Note [reducer stats on the GPU]: on the CPU, finish() returns once every bucket is reduced,
  // so it sums the pass's timing then. On a GPU, finish() only makes the compute stream wait for
  // the reductions; blocking the host until the watcher saw them end would leave the GPU idle
  // while the host then queued the optimizer step (7 % of a GPT-2 step on an H200). The pass's
  // timing is summed later instead: at the next pass, when stats are read, or at destruction.
  void collect_timing() {
    if (!timing_pending) return;
    timing_pending = false;
    const auto launched_works = size_t(std::count(launched_now.begin(), launched_now.end(), 1));
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return finished == launched_works; });
    }
    const auto end = Clock::now();
    // The group runs its collectives one at a time in launch order, so bucket b was being
    // reduced from max(its launch, the previous bucket's end) to its end.
    auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
    Clock::time_point prev_done = Clock::time_point::min(), last_done = pending_backward_end;
    for (size_t b = 0; b < layout.size(); ++b) {
      if (!launched_now[b]) continue;
      const auto start = std::max(launched[b], prev_done);
      stats.comm_seconds += secs(done[b] - start);
      if (pending_backward_end > start) stats.hidden_seconds += secs(std::min(done[b], pending_backward_end) - start);
      prev_done = done[b];
      last_done = std::max(last_done, done[b]);
    }
    // On the CPU finish() waited until `end`; on a GPU the host did not wait, and what the
    // reductions added after the backward pass is until the last one ended.
    stats.exposed_seconds += secs((cuda_device >= 0 ? last_done : end) - pending_backward_end);
    ++stats.reductions;
  }

  // Note [reducer watcher on the GPU]: the watcher must block the host until a bucket is really
  // reduced, hence wait(timeout): NCCL's plain wait() would instead return at once after making
  // this thread's current stream wait for the reduction. That stream is the device's legacy
  // default stream, which the backward pass may be running on, so the rest of backward would
  // queue behind every bucket and nothing would overlap. The long timeout only bounds a hang;
  // the group's own per-op timeout fires first.
  void watch() {
#ifdef TRIREME_WITH_CUDA
    if (cuda_device >= 0) cuda::set_device(cuda_device);  // so no context is made on GPU 0
#endif
    std::unique_lock lock(mutex);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      auto [b, w] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      try {
        w->wait(std::chrono::hours(1));
      } catch (...) {  // finish() waits on it too and reports the error
      }
      w.reset();  // the watcher keeps no bucket alive
      auto t = Clock::now();
      lock.lock();
      done[b] = t;
      ++finished;
      cv.notify_all();
    }
  }

  // Bucket b's buffer, allocated (zeroed: padding and absent gradients count as zero) when a
  // ZeRO-2/3 pass first needs it.
  Tensor& buffer(size_t b) {
    if (!buffers[b].defined()) {
      NoGradGuard no_grad;
      buffers[b] = zeros({layout[b].numel}, layout[b].dtype, params[layout[b].slots[0].param].device());
    }
    return buffers[b];
  }
  // Parameter i's slot of its bucket, shaped as the parameter.
  Tensor view(size_t i) {
    const auto [b, k] = where[i];
    return buffer(b).alias(params[i].sizes(), contiguous_strides(params[i].sizes()), layout[b].slots[k].offset);
  }

  void on_grad_ready(size_t i, Tensor& grad) {
    if (!sync || arrived[i]) return;
    {
      NoGradGuard no_grad;
      Tensor slot = view(i);
      if (frees_buckets()) {
        copy_(slot, grad);
        params[i].set_grad(Tensor());  // Note [ZeRO-2 buckets]
      } else if (!(grad.storage() == slot.storage() && grad.offset() == slot.offset())) {
        copy_(slot, grad);
        params[i].set_grad(slot);
      }
    }
    arrived[i] = 1;
    const size_t b = where[i].first;
    if (--remaining[b] == 0 && overlap) launch_ready();
  }

  // Launches buckets in index order as long as the next one is complete.
  void launch_ready() {
    while (next_launch < layout.size() && remaining[next_launch] == 0) launch(next_launch++);
  }

  void launch(size_t b) {
    if (frees_buckets()) drop_finished();
    launched[b] = Clock::now();
    NoGradGuard no_grad;
    if (zero == 0) {
      if (communicating()) {
        works[b] = dist::record_collective("all_reduce", {buffers[b]}, [group = dp](Tensor* const* t) {
          return group->all_reduce(*t[0], {.op = dist::ReduceOp::avg});
        });
      }
    } else {
      // Note [ZeRO-2 buckets]: into the shard while it holds nothing of this step, else beside it.
      const bool beside = frees_buckets() && !shard_fresh[b];
      if (beside) scratch[b] = empty_like(shard_grads[b]);
      Tensor& out = beside ? scratch[b] : shard_grads[b];
      if (communicating()) {
        works[b] = dist::record_collective("reduce_scatter", {out, buffer(b)}, [group = dp](Tensor* const* t) {
          return group->reduce_scatter(*t[0], *t[1], {.op = dist::ReduceOp::avg});
        });
      } else {
        copy_(out, buffer(b));
      }
      if (frees_buckets() && !communicating()) settle(b);
    }
    if (works[b]) {
      launched_now[b] = 1;
      std::lock_guard lock(mutex);
      queue.emplace_back(b, works[b]);
      cv.notify_all();
    }
  }

  // ZeRO-2/3, after bucket b's reduce-scatter: its scratch added to the shard, bucket and scratch
  // given back.
  void settle(size_t b) {
    NoGradGuard no_grad;
    if (scratch[b].defined()) add_(shard_grads[b], scratch[b]);
    shard_fresh[b] = 0;
    scratch[b] = Tensor();
    buffers[b] = Tensor();
  }
  // ZeRO-2/3: settles the launched buckets whose collectives have finished, and waits for the
  // oldest while kMaxInFlight are still under way: a backward that runs ahead of the network
  // would otherwise hold every bucket (the whole gradients) before the first one is sent.
  static constexpr size_t kMaxInFlight = 2;
  void drop_finished() {
    size_t in_flight = 0;
    for (size_t b = 0; b < next_launch; ++b) {
      if (!works[b]) continue;
      if (!works[b]->is_completed()) {
        ++in_flight;
        continue;
      }
      works[b]->wait();  // rethrows its error; on a GPU, orders this stream after it
      works[b].reset();
      settle(b);
    }
    for (size_t b = 0; b < next_launch && in_flight >= kMaxInFlight; ++b) {
      if (!works[b]) continue;
      works[b]->wait();
      works[b].reset();
      settle(b);
      --in_flight;
    }
  }
};

Reducer::Reducer(nn::NamedTensors params, dist::ProcessGroup* dp, ReducerOptions options)
    : params_(std::move(params)), dp_(dp), options_(options), state_(std::make_shared<State>()) {
  State& s = *state_;
  TRIREME_CHECK(options.zero >= 0 && options.zero <= 3, "Reducer: ZeRO stage ", options.zero, " is not 0, 1, 2 or 3");
  s.dp = dp;
  s.zero = options.zero;
  s.overlap = options.overlap;
  std::vector<std::pair<int64_t, DType>> sizes;
  for (const auto& [name, p] : params_) {
    TRIREME_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "Reducer: parameter '", name,
                  "' must be a leaf that requires grad");
    sizes.emplace_back(p.numel(), p.dtype());
    s.params.push_back(p);
  }
  s.layout = assign_buckets(sizes, options.bucket_bytes, options.zero > 0 ? dp_size() : 1, options.units);
  s.where.resize(params_.size());
  s.buffers.resize(s.layout.size());
  s.scratch.resize(s.layout.size());
  s.shard_fresh.assign(s.layout.size(), 1);
  for (size_t b = 0; b < s.layout.size(); ++b) {
    const BucketLayout& L = s.layout[b];
    const Device device = params_[L.slots[0].param].second.device();
    if (!s.frees_buckets()) s.buffers[b] = zeros({L.numel}, L.dtype, device);
    if (options.zero > 0) s.shard_grads.push_back(zeros({L.numel / dp_size()}, L.dtype, device));
    for (size_t k = 0; k < L.slots.size(); ++k) s.where[L.slots[k].param] = {b, k};
  }
  if (!params_.empty() && params_.front().second.device().is_cuda()) {
    s.cuda_device = params_.front().second.device().index;
  }
  s.arrived.assign(params_.size(), 0);
  s.remaining.assign(s.layout.size(), 0);
  s.works.resize(s.layout.size());
  s.launched_now.assign(s.layout.size(), 0);
  s.launched.resize(s.layout.size());
  s.done.resize(s.layout.size());
  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].second.register_grad_ready_hook([weak, i](Tensor& grad) {
      if (auto st = weak.lock()) st->on_grad_ready(i, grad);
    });
  }
  s.watcher = std::thread([st = state_.get()] { st->watch(); });
}

Reducer::~Reducer() {
  State& s = *state_;
  try {
    if (std::uncaught_exceptions() == 0) s.collect_timing();  // an error unwinding: no stats wanted
  } catch (...) {
  }
  for (auto& w : s.works) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
    }
  }
  {
    std::lock_guard lock(s.mutex);
    s.stop = true;
    s.cv.notify_all();
  }
  s.watcher.join();
}

void Reducer::reduce_accumulated() {
  prepare_backward(true);
  State& s = *state_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = s.params[i].grad();
    if (g.defined()) s.on_grad_ready(i, g);  // into its bucket (a no-op copy once it is the view)
  }
  finish();
}

const std::vector<BucketLayout>& Reducer::buckets() const { return state_->layout; }
const ReducerStats& Reducer::stats() const {
  state_->collect_timing();
  return state_->stats;
}
void Reducer::reset_stats() {
  state_->collect_timing();
  state_->stats = {};
}

const Tensor& Reducer::bucket_buffer(size_t bucket) const { return state_->buffers.at(bucket); }

const Tensor& Reducer::shard_grad(size_t bucket) const {
  TRIREME_CHECK(options_.zero > 0, "Reducer::shard_grad: the reducer shards no gradients (ZeRO stage 0)");
  return state_->shard_grads.at(bucket);
}

void Reducer::prepare_backward(bool sync) {
  State& s = *state_;
  // ZeRO-2/3 reduce in every backward; a pass that no finish() ended (a micro-batch before the
  // last) is completed first: its buckets whose gradients never arrived are launched as zeros.
  if (s.frees_buckets()) {
    if (s.open) finish();
    sync = true;
  }
  s.collect_timing();  // the previous pass's, before its records are reset
  s.sync = sync;
  if (!sync) return;
  s.open = true;
  s.arrived.assign(params_.size(), 0);
  for (size_t b = 0; b < s.layout.size(); ++b) {
    s.remaining[b] = s.layout[b].slots.size();
    s.works[b] = nullptr;
    s.launched_now[b] = 0;
  }
  s.next_launch = 0;
  std::lock_guard lock(s.mutex);
  s.finished = 0;
}

void Reducer::finish() {
  State& s = *state_;
  TRIREME_CHECK(s.sync, "Reducer::finish: call prepare_backward(true) before the backward pass that reduces");
  const auto backward_end = Clock::now();
  // Parameters whose gradient never arrived (unused this step) count as zeros, so every rank
  // still launches every bucket, in order (under ZeRO-2/3 a bucket is allocated zeroed).
  for (size_t i = 0; i < params_.size(); ++i) {
    if (s.arrived[i]) continue;
    if (!s.frees_buckets()) {
      NoGradGuard no_grad;
      Tensor v = s.view(i);
      zero_(v);
      s.params[i].set_grad(v);
    }
    s.arrived[i] = 1;
    --s.remaining[s.where[i].first];
  }
  s.launch_ready();
  for (size_t b = 0; b < s.layout.size(); ++b) {
    if (!s.works[b]) continue;
    s.works[b]->wait();  // Gloo: until reduced; NCCL: the compute stream waits, the host goes on
    if (s.frees_buckets()) {
      s.works[b].reset();
      s.settle(b);
    }
  }
  s.sync = false;
  s.open = false;
  s.timing_pending = true;
  s.pending_backward_end = backward_end;
  if (s.cuda_device < 0) s.collect_timing();
}

void Reducer::zero_grad() {
  State& s = *state_;
  NoGradGuard no_grad;
  for (size_t b = 0; b < s.layout.size(); ++b) {
    if (options_.zero > 0) zero_(s.shard_grads[b]);
    s.shard_fresh[b] = 1;
    if (s.frees_buckets()) continue;
    // The gradients are views of the bucket (once a reduction ran): they are zeroed with it.
    zero_(s.buffers[b]);
    for (const BucketSlot& slot : s.layout[b].slots) {
      Tensor g = s.params[slot.param].grad();
      if (g.defined() && g.storage() != s.buffers[b].storage()) zero_(g);
    }
  }
}

}  // namespace trireme::parallel
