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
                                         int64_t pad_to) {
  TRIREME_CHECK(bucket_bytes > 0 && pad_to >= 1, "assign_buckets: bucket_bytes (", bucket_bytes,
                ") and pad_to (", pad_to, ") must be positive");
  std::vector<BucketLayout> out;
  BucketLayout cur;
  auto close = [&] {
    if (cur.slots.empty()) return;
    cur.numel = round_up(cur.numel, pad_to);
    out.push_back(std::move(cur));
    cur = BucketLayout();
  };
  for (size_t k = params.size(); k-- > 0;) {
    const auto [numel, dtype] = params[k];
    const int64_t bytes = numel * int64_t(dtype_size(dtype));
    const int64_t cur_bytes = cur.numel * int64_t(dtype_size(cur.dtype));
    if (!cur.slots.empty() && (dtype != cur.dtype || cur_bytes + bytes > bucket_bytes)) close();
    if (cur.slots.empty()) cur.dtype = dtype;
    cur.slots.push_back({k, cur.numel, numel});
    cur.numel += numel;
  }
  close();
  return out;
}

using Clock = std::chrono::steady_clock;

struct Reducer::State {
  std::vector<BucketLayout> layout;
  std::vector<Tensor> buffers;       // one flat gradient buffer per bucket
  std::vector<Tensor> shard_grads;   // zero1: this rank's chunk of each bucket, averaged
  std::vector<Tensor> views;         // per parameter: its slot of its bucket, shaped as the parameter
  std::vector<std::pair<size_t, size_t>> where;  // per parameter: (bucket, slot)
  std::vector<Tensor> params;
  dist::ProcessGroup* dp = nullptr;
  bool zero1 = false;
  bool overlap = true;
  int cuda_device = -1;  // the parameters' GPU, or -1 on the CPU

  // The current backward pass.
  bool sync = false;
  std::vector<char> arrived;      // per parameter
  std::vector<size_t> remaining;  // per bucket: gradients still to arrive
  size_t next_launch = 0;
  std::vector<dist::WorkPtr> works;
  std::vector<Clock::time_point> launched, done;

  // The completion watcher: waits on each launched bucket to time when it finished.
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<size_t> queue;
  size_t finished = 0;  // buckets the watcher has seen complete this pass
  bool stop = false;
  std::thread watcher;

  ReducerStats stats;
  // A pass whose timing is still to be summed (Note [reducer stats on the GPU]).
  bool timing_pending = false;
  Clock::time_point pending_backward_end;

  bool communicating() const { return dp != nullptr && dp->size() > 1; }

  // Note [reducer stats on the GPU]: on the CPU, finish() returns once every bucket is reduced,
  // so it sums the pass's timing then. On a GPU, finish() only makes the compute stream wait for
  // the reductions; blocking the host until the watcher saw them end would leave the GPU idle
  // while the host then queued the optimizer step (7 % of a GPT-2 step on an H200). The pass's
  // timing is summed later instead: at the next pass, when stats are read, or at destruction.
  void collect_timing() {
    if (!timing_pending) return;
    timing_pending = false;
    const auto launched_works =
        size_t(std::count_if(works.begin(), works.end(), [](const dist::WorkPtr& w) { return w != nullptr; }));
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
      if (!works[b]) continue;
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
      size_t b = queue.front();
      queue.pop_front();
      dist::WorkPtr w = works[b];
      lock.unlock();
      try {
        w->wait(std::chrono::hours(1));
      } catch (...) {  // finish() waits on it too and reports the error
      }
      auto t = Clock::now();
      lock.lock();
      done[b] = t;
      ++finished;
      cv.notify_all();
    }
  }

  void on_grad_ready(size_t i, Tensor& grad) {
    if (!sync || arrived[i]) return;
    const Tensor& view = views[i];
    if (!(grad.storage() == view.storage() && grad.offset() == view.offset())) {
      NoGradGuard no_grad;
      Tensor dst = view;
      copy_(dst, grad);
      params[i].set_grad(view);
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
    launched[b] = Clock::now();
    if (!zero1) {
      if (communicating()) works[b] = dp->all_reduce(buffers[b], {.op = dist::ReduceOp::avg});
    } else if (communicating()) {
      works[b] = dp->reduce_scatter(shard_grads[b], buffers[b], {.op = dist::ReduceOp::avg});
    } else {
      NoGradGuard no_grad;
      copy_(shard_grads[b], buffers[b]);
    }
    if (works[b]) {
      std::lock_guard lock(mutex);
      queue.push_back(b);
      cv.notify_all();
    }
  }
};

Reducer::Reducer(nn::NamedTensors params, dist::ProcessGroup* dp, ReducerOptions options)
    : params_(std::move(params)), dp_(dp), options_(options), state_(std::make_shared<State>()) {
  State& s = *state_;
  s.dp = dp;
  s.zero1 = options.zero1;
  s.overlap = options.overlap;
  std::vector<std::pair<int64_t, DType>> sizes;
  for (const auto& [name, p] : params_) {
    TRIREME_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "Reducer: parameter '", name,
                  "' must be a leaf that requires grad");
    sizes.emplace_back(p.numel(), p.dtype());
    s.params.push_back(p);
  }
  s.layout = assign_buckets(sizes, options.bucket_bytes, options.zero1 ? dp_size() : 1);
  s.views.resize(params_.size());
  s.where.resize(params_.size());
  for (size_t b = 0; b < s.layout.size(); ++b) {
    const BucketLayout& L = s.layout[b];
    const Device device = params_[L.slots[0].param].second.device();
    s.buffers.push_back(zeros({L.numel}, L.dtype, device));
    if (options.zero1) s.shard_grads.push_back(zeros({L.numel / dp_size()}, L.dtype, device));
    for (size_t k = 0; k < L.slots.size(); ++k) {
      const BucketSlot& slot = L.slots[k];
      const Tensor& p = params_[slot.param].second;
      s.views[slot.param] = s.buffers[b].alias(p.sizes(), contiguous_strides(p.sizes()), slot.offset);
      s.where[slot.param] = {b, k};
    }
  }
  if (!params_.empty() && params_.front().second.device().is_cuda()) {
    s.cuda_device = params_.front().second.device().index;
  }
  s.arrived.assign(params_.size(), 0);
  s.remaining.assign(s.layout.size(), 0);
  s.works.resize(s.layout.size());
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
  TRIREME_CHECK(options_.zero1, "Reducer::shard_grad: the reducer was not built with zero1");
  return state_->shard_grads.at(bucket);
}

void Reducer::prepare_backward(bool sync) {
  State& s = *state_;
  s.collect_timing();  // the previous pass's, before its records are reset
  s.sync = sync;
  if (!sync) return;
  s.arrived.assign(params_.size(), 0);
  for (size_t b = 0; b < s.layout.size(); ++b) {
    s.remaining[b] = s.layout[b].slots.size();
    s.works[b] = nullptr;
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
  // still launches every bucket, in order.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (s.arrived[i]) continue;
    NoGradGuard no_grad;
    Tensor v = s.views[i];
    zero_(v);
    s.params[i].set_grad(v);
    s.arrived[i] = 1;
    --s.remaining[s.where[i].first];
  }
  s.launch_ready();
  for (auto& w : s.works)
    if (w) w->wait();  // Gloo: until reduced; NCCL: the compute stream waits, the host goes on
  s.sync = false;
  s.timing_pending = true;
  s.pending_backward_end = backward_end;
  if (s.cuda_device < 0) s.collect_timing();
}

}  // namespace trireme::parallel
