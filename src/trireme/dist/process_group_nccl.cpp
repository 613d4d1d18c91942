// ProcessGroupNccl: NCCL calls on the group's stream, events and the watchdog that turn hangs
// and lost peers into errors naming the op and the rank.
#include "trireme/dist/process_group_nccl.h"

#include "trireme/kernels/kernel_tape.h"

#ifdef TRIREME_WITH_NCCL

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <cuda_runtime.h>
#include <nccl.h>

#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/hex.h"
#include "trireme/dist/peer_all_reduce.h"

namespace trireme::dist {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType dtype, const std::string& op, bool reduces) {
  switch (dtype) {
    case DType::f64: return ncclFloat64;
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i64: return ncclInt64;
    case DType::i32: return ncclInt32;
    case DType::boolean:
      // Moving bytes is fine; a sum of bools is not a bool.
      TRIREME_CHECK(!reduces, "nccl ", op, ": reductions of bool tensors are not supported");
      return ncclUint8;
  }
  TRIREME_FAIL("nccl ", op, ": dtype ", dtype, " is not supported");
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;  // integers: the sum divided, rounding toward zero
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// A group's CUDA events, reused: every op needs one (two for a send/recv), hundreds a step under
// tensor parallelism, and creating and destroying them cost the host microseconds each.
// Re-recording an event is safe once an op is over: a stream that waited on it captured the
// record it waited for.
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cuda::DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    TRIREME_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void give(cudaEvent_t e) {
    if (!e) return;
    std::lock_guard lock(mutex_);
    free_.push_back(e);
  }

 private:
  int device_;
  std::mutex mutex_;  // its own: ops are dropped both under the group's lock and outside it
  std::vector<cudaEvent_t> free_;
};

// One op, shared by its Work and the group's list of ops in flight. Guarded by Impl::mutex.
struct OpState {
  std::string what;             // "all_reduce(sum, [1000] f32)"
  std::vector<Tensor> tensors;  // alive until the op is done on the GPU (Note [allocator streams])
  milliseconds timeout{0};
  cudaEvent_t done_event = nullptr;   // after the NCCL call, on the group's stream
  cudaEvent_t ready_event = nullptr;  // send/recv: the caller's stream when the op was queued
  Clock::time_point issued;
  bool started = false;  // false: a send/recv still queued (Note [nccl send/recv])
  bool done = false;
  std::string error;     // non-empty: the op failed (the communicator was aborted)
  // send/recv
  bool is_send = false;
  int peer = -1;

  std::shared_ptr<EventPool> events;  // where done_event and ready_event came from

  ~OpState() {
    if (!events) return;
    events->give(done_event);
    events->give(ready_event);
  }
};

}  // namespace

bool nccl_is_built() { return true; }

struct ProcessGroupNccl::Impl {
  std::shared_ptr<StoreClient> store;
  NcclOptions options;
  int device = 0;
  int rank = 0;
  std::vector<int> global_ranks;
  std::vector<std::string> member_names;  // describe_rank of each member (the group may be gone)
  std::string self_name;                  // "rank 0 of a 2-rank nccl group"
  std::string comm_name;
  std::map<std::string, int> groups_named;

  ncclComm_t comm = nullptr;
  cuda::Stream stream;
  cudaEvent_t ready = nullptr;  // the caller's stream before each collective (reused)
  std::shared_ptr<EventPool> events;  // the ops' events
  Tensor barrier_buffer;
  // Sums and averages of floating-point tensors when the ranks share a host (Note [peer
  // all-reduce]); null when they cannot, peer_why_not then says why.
  std::unique_ptr<PeerAllReduce> peer;
  std::string peer_why_not;
  bool peer_rs_ag = false;  // reduce-scatter and all-gather through it too

  std::mutex mutex;  // everything below, and every NCCL call on comm
  std::vector<std::shared_ptr<OpState>> in_flight;  // issued and not yet seen done, in issue order
  std::vector<std::shared_ptr<OpState>> queued;     // sends/recvs not yet issued
  bool aborted = false;
  std::string failure;  // why the communicator was aborted

  std::thread watchdog;
  std::condition_variable wake;
  bool stopping = false;
  Clock::time_point last_liveness_check{};

  milliseconds timeout_for(milliseconds t) const { return t.count() > 0 ? t : options.timeout; }

  std::string failed_on(const std::string& op) const { return str_cat("nccl ", op, " failed on ", self_name); }

  // Aborts the communicator: NCCL's kernels of this group end, so streams waiting on them go on;
  // every op in flight or queued and every later call report `message`.
  void abort_locked(const std::string& message) {
    if (aborted) return;
    aborted = true;
    failure = message;
    std::fprintf(stderr, "[trireme] %s; the NCCL communicator was aborted\n", message.c_str());
    // First the peer all-reduce's waits on the stream pass (they are not NCCL's: the abort
    // would not end them, and ncclCommAbort waits for the stream it shares with them).
    if (peer) peer->release();
    if (comm) {
      cuda::DeviceGuard guard(device);
      ncclCommAbort(comm);  // also frees it
      comm = nullptr;
    }
    for (auto& op : in_flight)
      if (!op->done && op->error.empty()) op->error = message;
    for (auto& op : queued) {
      op->error = message;
      op->tensors.clear();  // never handed to NCCL
    }
    queued.clear();
  }

  void check_usable_locked(const std::string& op) const {
    TRIREME_CHECK(!aborted, "nccl ", op, " on ", self_name, ": the communicator was aborted earlier: ", failure);
    TRIREME_CHECK(comm, "nccl ", op, " on ", self_name, ": the process group has been destroyed");
  }

  // After an NCCL call on the (nonblocking) communicator: waits until NCCL has queued it on the
  // stream. Connecting to peers happens here, so a peer that does not turn up times out.
  void finish_call_locked(ncclResult_t result, const std::string& op, milliseconds timeout) {
    auto start = Clock::now(), deadline = start + timeout, next_liveness_check = start + std::chrono::seconds(1);
    ncclResult_t state = result;
    while (state == ncclSuccess || state == ncclInProgress) {
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) break;
      if (state != ncclInProgress) break;
      auto now = Clock::now();
      if (now > deadline) {
        abort_locked(str_cat(failed_on(op), ": timed out after ", timeout.count(),
                             " ms while NCCL set it up (a peer is hung, slow, or never called ", op, ")"));
        TRIREME_FAIL(failure);
      }
      if (now > next_liveness_check) {  // a peer that died will not turn up: say so now
        next_liveness_check = now + std::chrono::seconds(1);
        if (std::string cause = dead_members(); !cause.empty()) {
          abort_locked(str_cat(failed_on(op), ": ", cause));
          TRIREME_FAIL(failure);
        }
      }
      // A nonblocking communicator launches every collective from a thread of its own and
      // answers ncclInProgress until that thread has queued it, tens of microseconds later:
      // yield until then rather than sleep, since a 100 us sleep would be most of the op's cost
      // on the host. Only a call that needs longer (connecting to peers) sleeps between looks.
      if (now - start < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    if (state != ncclSuccess) {
      abort_locked(nccl_failure(op, state));
      TRIREME_FAIL(failure);
    }
  }

  std::string nccl_failure(const std::string& op, ncclResult_t result) const {
    const char* last = comm ? ncclGetLastError(comm) : nullptr;
    return str_cat(failed_on(op), ": NCCL error ", int(result), " (", ncclGetErrorString(result), ")",
                   last && *last ? str_cat(": ", last) : std::string());
  }

  // Runs one NCCL collective on the group's stream after the caller's stream, and returns its op.
  template <class Call>
  std::shared_ptr<OpState> issue(const std::string& what, milliseconds timeout, std::vector<Tensor> tensors,
                                 Call&& call) {
    return issue_on(/*caller_stream=*/false, what, timeout, std::move(tensors), [&](cudaStream_t) { return call(); });
  }

  // As issue(), but on the caller's current stream: its waits hold that stream, not the group's.
  // For the end of an op whose result the caller's stream needs next anyway (the sum of a staged
  // reduce-scatter), where two hops between the streams would only add latency.
  template <class Call>
  std::shared_ptr<OpState> issue_on_caller_stream(const std::string& what, milliseconds timeout,
                                                  std::vector<Tensor> tensors, Call&& call) {
    return issue_on(/*caller_stream=*/true, what, timeout, std::move(tensors), std::forward<Call>(call));
  }

  // call(s) queues the op on stream s: the group's (after the caller's) or the caller's own.
  template <class Call>
  std::shared_ptr<OpState> issue_on(bool caller_stream, const std::string& what, milliseconds timeout,
                                    std::vector<Tensor> tensors, Call&& call) {
    // A collective issued while a step is traced must be one of its nodes, or replays would skip it.
    if (KernelTape* tape = active_kernel_tape(); tape && !tape->in_kernel()) {
      TRIREME_FAIL("graph::trace: nccl ", what, " is not recorded in the traced step (dist/recorded_collective.h), "
                   "so a replay would skip it; train.mode = \"eager\" runs this layout");
    }
    std::lock_guard lock(mutex);
    check_usable_locked(what);
    flush_locked();  // queued sends/recvs go first, as they were issued first
    cuda::DeviceGuard guard(device);
    const cudaStream_t caller = cuda::current_stream(device).handle();
    if (!caller_stream) {
      TRIREME_CUDA_CHECK(cudaEventRecord(ready, caller));
      TRIREME_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), ready, 0));
    }
    const cudaStream_t s = caller_stream ? caller : stream.handle();
    auto op = std::make_shared<OpState>();
    op->what = what;
    op->tensors = std::move(tensors);
    op->timeout = timeout;
    op->events = events;
    op->done_event = events->take();
    finish_call_locked(call(s), what, timeout);
    TRIREME_CUDA_CHECK(cudaEventRecord(op->done_event, s));
    op->started = true;
    op->issued = Clock::now();
    in_flight.push_back(op);
    return op;
  }

  // Issues the queued sends/recvs together (Note [nccl send/recv]).
  void flush_locked() {
    if (queued.empty()) return;
    check_usable_locked(queued.front()->what);
    cuda::DeviceGuard guard(device);
    std::string what;
    for (auto& op : queued) {
      TRIREME_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), op->ready_event, 0));
      what += (what.empty() ? "" : " + ") + op->what;
    }
    milliseconds timeout{0};
    std::vector<ncclDataType_t> types;  // before the NCCL group: nothing may throw inside it
    for (auto& op : queued) {
      timeout = std::max(timeout, op->timeout);
      types.push_back(nccl_dtype(op->tensors.front().dtype(), op->what, false));
    }
    ncclResult_t result = ncclGroupStart();
    for (size_t i = 0; i < queued.size() && result == ncclSuccess; ++i) {
      const OpState& op = *queued[i];
      const Tensor& t = op.tensors.front();
      if (t.numel() == 0) continue;
      auto count = static_cast<size_t>(t.numel());
      result = op.is_send ? ncclSend(t.data_ptr(), count, types[i], op.peer, comm, stream.handle())
                          : ncclRecv(t.data_ptr(), count, types[i], op.peer, comm, stream.handle());
      if (result == ncclInProgress) result = ncclSuccess;
    }
    ncclResult_t end = ncclGroupEnd();
    std::vector<std::shared_ptr<OpState>> ops = std::move(queued);
    queued.clear();
    try {
      finish_call_locked(result != ncclSuccess ? result : end, what, timeout);
    } catch (const std::exception&) {
      for (auto& op : ops) {  // never started: their waits report the failure
        op->error = failure;
        op->tensors.clear();
      }
      throw;
    }
    for (auto& op : ops) {
      TRIREME_CUDA_CHECK(cudaEventRecord(op->done_event, stream.handle()));
      op->started = true;
      op->issued = Clock::now();
      in_flight.push_back(op);
    }
  }

  // Marks ops whose event has happened as done (releasing their tensors) and drops them.
  void reap_locked() {
    std::erase_if(in_flight, [](const std::shared_ptr<OpState>& op) {
      if (!op->done && cudaEventQuery(op->done_event) == cudaSuccess) {
        op->done = true;
        op->tensors.clear();
      }
      return op->done;
    });
  }

  // The watchdog's checks (also run by wait(timeout)): NCCL's asynchronous errors and ops past
  // their timeout abort the communicator.
  void check_locked(Clock::time_point now) {
    reap_locked();
    if (aborted || !comm) return;
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
      // NCCL may notice a dead peer before the store does: look a few times for who it was.
      std::string message = nccl_failure(in_flight.empty() ? std::string("an op") : in_flight.front()->what, state);
      for (int attempt = 0; attempt < 10; ++attempt) {
        if (std::string cause = dead_members(); !cause.empty()) {
          message += " (" + cause + ")";
          break;
        }
        std::this_thread::sleep_for(milliseconds(50));
      }
      abort_locked(message);
      return;
    }
    for (auto& op : in_flight) {
      if (now - op->issued > op->timeout) {
        abort_locked(str_cat(failed_on(op->what), ": timed out after ", op->timeout.count(),
                             " ms (a peer is hung, slow, or never called ", op->what, ")"));
        return;
      }
    }
  }

  // When an op has been running for over a second, asks the store (at most once a second)
  // whether a member died (Note [store liveness]); a dead member aborts the communicator.
  void check_liveness() {
    std::string stuck;
    {
      std::lock_guard lock(mutex);
      auto now = Clock::now();
      if (aborted || in_flight.empty() || now - in_flight.front()->issued < std::chrono::seconds(1) ||
          now - last_liveness_check < std::chrono::seconds(1))
        return;
      last_liveness_check = now;
      stuck = in_flight.front()->what;
    }
    std::string cause = dead_members();
    if (cause.empty()) return;
    std::lock_guard lock(mutex);
    abort_locked(str_cat(failed_on(stuck), ": ", cause));
  }

  // "rank 1 exited or was killed" when the store saw members of this group die; "" when none
  // did, or the store cannot be asked (it lived in a rank that died: the timeout still applies).
  std::string dead_members() const {
    std::vector<int> dead;
    try {
      for (int global : store->dead_ranks())
        for (size_t r = 0; r < global_ranks.size(); ++r)
          if (global_ranks[r] == global) dead.push_back(static_cast<int>(r));
    } catch (const std::exception&) {
      return "";
    }
    if (dead.empty()) return "";
    // The first to go is the likeliest cause; later ones may have failed because of it.
    std::string cause = member_names[size_t(dead[0])] + " exited or was killed";
    for (size_t i = 1; i < dead.size(); ++i) cause += (i == 1 ? " (after it: " : ", ") + member_names[size_t(dead[i])];
    if (dead.size() > 1) cause += ")";
    return cause;
  }

  void watchdog_loop() {
    cudaSetDevice(device);  // cudaEventQuery works on any thread, but NCCL's abort wants the device
    std::unique_lock lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, options.watchdog_interval);
      if (stopping) break;
      check_locked(Clock::now());
      bool look = !aborted && !in_flight.empty();
      lock.unlock();
      if (look) check_liveness();
      lock.lock();
    }
  }

  // Stops the watchdog, lets the ops in flight finish (up to the timeout) and releases the
  // communicator. Safe on a half-constructed group. While an exception unwinds (unwinding), ops
  // still in flight are aborted at once: their peers may never answer a rank that has failed,
  // and waiting out the timeout would make the failure look like a hang for minutes.
  void shutdown(bool unwinding = false) {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (watchdog.joinable()) watchdog.join();
    std::unique_lock lock(mutex);
    for (auto& op : queued) {
      op->error = str_cat("nccl ", op->what, " on ", self_name, ": the process group was destroyed before it started");
      op->tensors.clear();
    }
    queued.clear();
    reap_locked();
    if (unwinding && !in_flight.empty())
      abort_locked(str_cat(failed_on(in_flight.front()->what), ": still running when an error ended this rank"));
    auto deadline = Clock::now() + options.timeout;
    while (!aborted) {
      check_locked(Clock::now());
      if (in_flight.empty()) break;
      if (Clock::now() > deadline) {
        abort_locked(str_cat(failed_on(in_flight.front()->what), ": still running when the group was destroyed, ",
                             options.timeout.count(), " ms later"));
        break;
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
    if (comm) {
      cuda::DeviceGuard guard(device);
      // Finalize flushes NCCL's work and may wait for peers: bounded, then aborted.
      ncclResult_t state = ncclCommFinalize(comm);
      auto finalize_deadline = Clock::now() + options.timeout;
      while (state == ncclSuccess || state == ncclInProgress) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) break;
        if (Clock::now() > finalize_deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm);
      } else {
        std::fprintf(stderr, "[trireme] nccl: %s could not finalize its communicator (%s); aborting it\n",
                     self_name.c_str(), ncclGetErrorString(state));
        ncclCommAbort(comm);
      }
      comm = nullptr;
    }
    for (auto& op : in_flight) op->tensors.clear();
    in_flight.clear();
    peer.reset();
    barrier_buffer = Tensor();
    if (ready) cudaEventDestroy(ready), ready = nullptr;
  }
};

namespace {

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<ProcessGroupNccl::Impl> impl, std::shared_ptr<OpState> op)
      : impl_(std::move(impl)), op_(std::move(op)) {}

  bool is_completed() override {
    std::lock_guard lock(impl_->mutex);
    start_locked();
    if (!op_->error.empty() || op_->done) return true;
    cudaError_t e = cudaEventQuery(op_->done_event);
    if (e == cudaSuccess) {
      op_->done = true;
      op_->tensors.clear();
      return true;
    }
    TRIREME_CHECK(e == cudaErrorNotReady, "nccl ", op_->what, ": CUDA error ", int(e), " (", cudaGetErrorString(e),
                  ") while checking on it");
    return false;
  }

  void wait(milliseconds timeout) override {
    auto& impl = *impl_;
    if (timeout.count() == 0) {
      std::lock_guard lock(impl.mutex);
      start_locked();
      TRIREME_CHECK(op_->error.empty(), op_->error);
      if (op_->done) return;
      // The caller's stream waits on the GPU; the host goes on (Note [nccl streams]).
      cuda::DeviceGuard guard(impl.device);
      TRIREME_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(impl.device).handle(), op_->done_event, 0));
      return;
    }
    auto start = Clock::now();
    for (int spins = 0;; ++spins) {
      {
        std::lock_guard lock(impl.mutex);
        start_locked();
        TRIREME_CHECK(op_->error.empty(), op_->error);
        if (op_->done) return;
        if (cudaEventQuery(op_->done_event) == cudaSuccess) {
          op_->done = true;
          op_->tensors.clear();
          return;
        }
        auto now = Clock::now();
        impl.check_locked(now);
        TRIREME_CHECK(op_->error.empty(), op_->error);
        if (now - start > timeout) {
          impl.abort_locked(str_cat(impl.failed_on(op_->what), ": not done within the ", timeout.count(),
                                    " ms its wait allowed (a peer is hung, slow, or never called ", op_->what, ")"));
          TRIREME_FAIL(op_->error);
        }
      }
      impl.check_liveness();
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(spins > 2000 ? 1000 : 100));
    }
  }

 private:
  // A queued send/recv starts now (Note [nccl send/recv]); its error lands in op_->error.
  void start_locked() {
    if (op_->started || !op_->error.empty()) return;
    try {
      impl_->flush_locked();
    } catch (const std::exception& e) {
      if (op_->error.empty()) op_->error = e.what();
    }
  }

  std::shared_ptr<ProcessGroupNccl::Impl> impl_;
  std::shared_ptr<OpState> op_;
};

void check_tensor(const ProcessGroupNccl::Impl& impl, const char* op, const Tensor& t, const char* which) {
  TRIREME_CHECK(t.defined(), "nccl ", op, ": the ", which, " tensor is undefined");
  TRIREME_CHECK(t.device() == Device::cuda(impl.device), "nccl ", op, ": the ", which, " tensor is on ", t.device(),
                " but this group's GPU is cuda:", impl.device, " (CPU tensors go through the gloo backend)");
  TRIREME_CHECK(t.is_contiguous(), "nccl ", op, ": the ", which, " tensor ", t.sizes(), " must be contiguous");
}

// One of the peer path's collectives (Note [peer all-reduce]), run like an NCCL one: on the
// group's stream after the caller's, with the same events, watchdog and errors.
template <class Call>
WorkPtr issue_on_peer(const std::shared_ptr<ProcessGroupNccl::Impl>& impl, const std::string& what,
                      milliseconds timeout, std::vector<Tensor> tensors, Call&& call) {
  auto state = impl->issue(what, timeout, std::move(tensors), [&] {
    call(*impl->peer, impl->stream.handle());
    return ncclSuccess;
  });
  return std::make_shared<NcclWork>(impl, state);
}

}  // namespace

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, int size, NcclOptions options)
    : ProcessGroupNccl(std::move(store), rank, [size] {
        std::vector<int> ranks(static_cast<size_t>(std::max(size, 0)));
        for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
        return ranks;
      }(), std::move(options)) {}

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, std::vector<int> global_ranks,
                                   NcclOptions options)
    : ProcessGroup(rank, static_cast<int>(global_ranks.size()), global_ranks), impl_(std::make_shared<Impl>()) {
  TRIREME_CHECK(store, "ProcessGroupNccl: a store is required");
  TRIREME_CHECK(cuda::is_available(), "ProcessGroupNccl: no usable GPU: ", cuda::unavailable_reason());
  Impl& impl = *impl_;
  impl.store = std::move(store);
  impl.rank = rank;
  impl.global_ranks = global_ranks_;
  impl.device = options.device >= 0 ? options.device : cuda::current_device();
  TRIREME_CHECK(impl.device < cuda::device_count(), "ProcessGroupNccl: device ", impl.device, " is not one of the ",
                cuda::device_count(), " GPUs");
  for (int r = 0; r < size_; ++r) impl.member_names.push_back(describe_rank(r));
  impl.self_name = str_cat(describe_rank(rank), " of a ", size_, "-rank nccl group");
  if (options.prefix.empty()) {
    const char* restart = std::getenv("TRIREME_RESTART_COUNT");
    options.prefix = str_cat("nccl/", restart ? restart : "0", "/world/");
  }
  impl.options = options;
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // see launcher.cpp

  try {
    cuda::DeviceGuard guard(impl.device);
    // Groups made again under the same prefix (in the same order on every rank) get fresh keys.
    static std::mutex instances_mutex;
    static std::map<std::string, int> instances;
    int instance;
    {
      std::lock_guard lock(instances_mutex);
      instance = instances[options.prefix]++;
    }
    std::string key = str_cat(options.prefix, "unique_id#", instance);
    ncclUniqueId id{};
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      TRIREME_CHECK(r == ncclSuccess, "ProcessGroupNccl: ncclGetUniqueId failed: ", ncclGetErrorString(r));
      impl.store->set(key, to_hex(&id, sizeof(id)));
    } else {
      std::string hex;
      try {
        hex = impl.store->get(key, options.timeout);
      } catch (const StoreTimeout&) {
        TRIREME_FAIL("ProcessGroupNccl: ", impl.self_name, " did not get the NCCL id from ", describe_rank(0),
                     " within ", options.timeout.count(), " ms (rank 0 did not create the group?)");
      }
      TRIREME_CHECK(from_hex(hex, &id, sizeof(id)), "ProcessGroupNccl: the store holds a malformed NCCL id at ", key);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; we poll, so a missing peer is a timeout, not a hang
    impl.comm_name = str_cat("trireme:", options.prefix, instance);
    config.commName = impl.comm_name.c_str();
    ncclResult_t r = ncclCommInitRankConfig(&impl.comm, size_, id, rank, &config);
    {
      std::lock_guard lock(impl.mutex);
      try {
        impl.finish_call_locked(r, "communicator creation", options.timeout);
      } catch (const Error& e) {
        TRIREME_FAIL("ProcessGroupNccl: ", impl.self_name, " could not create its communicator with the other ",
                     size_ - 1, " rank(s) on cuda:", impl.device, " within ", options.timeout.count(), " ms: ", e.what());
      }
    }
    impl.stream = cuda::Stream::create(impl.device);
    impl.events = std::make_shared<EventPool>(impl.device);
    impl.ready = impl.events->take();
    impl.peer = PeerAllReduce::create(*impl.store,
                                      {.key_prefix = str_cat(options.prefix, "peer#", instance, "/"),
                                       .rank = rank,
                                       .size = size_,
                                       .device = impl.device,
                                       .capacity = options.peer_slot_bytes,
                                       .timeout = options.timeout,
                                       .mode = options.peer_all_reduce},
                                      &impl.peer_why_not);
    impl.peer_rs_ag = impl.peer != nullptr;
    impl.barrier_buffer = Tensor::empty({1}, DType::f32, Device::cuda(impl.device));
    TRIREME_CUDA_CHECK(cudaMemsetAsync(impl.barrier_buffer.data_ptr(), 0, sizeof(float),
                                       cuda::current_stream(impl.device).handle()));
  } catch (...) {
    impl_->shutdown();
    throw;
  }
  impl_->watchdog = std::thread([impl = impl_.get()] { impl->watchdog_loop(); });
}

ProcessGroupNccl::~ProcessGroupNccl() { impl_->shutdown(std::uncaught_exceptions() > 0); }

int ProcessGroupNccl::device() const { return impl_->device; }
cuda::Stream ProcessGroupNccl::stream() const { return impl_->stream; }
bool ProcessGroupNccl::uses_peer_all_reduce() const { return impl_->peer != nullptr; }
bool ProcessGroupNccl::uses_peer_rs_ag() const { return impl_->peer_rs_ag; }
std::string ProcessGroupNccl::peer_all_reduce_why_not() const { return impl_->peer_why_not; }

void ProcessGroupNccl::abort(const std::string& reason) {
  std::lock_guard lock(impl_->mutex);
  impl_->abort_locked(str_cat("nccl group aborted on ", impl_->self_name, ": ", reason));
}

WorkPtr ProcessGroupNccl::all_reduce(const Tensor& tensor, const AllReduceOptions& options) {
  check_tensor(*impl_, "all_reduce", tensor, "input");
  std::string op = str_cat("all_reduce(", reduce_op_name(options.op), ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  ncclDataType_t type = nccl_dtype(tensor.dtype(), op, true);
  if (impl_->peer && PeerAllReduce::accepts(tensor, options.op)) {
    return issue_on_peer(impl_, op, impl_->timeout_for(options.timeout), {tensor},
                         [&](PeerAllReduce& peer, cudaStream_t s) { peer.all_reduce(tensor, options.op, s); });
  }
  auto state = impl_->issue(op, impl_->timeout_for(options.timeout), {tensor}, [&] {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type,
                         nccl_reduce_op(options.op), impl_->comm, impl_->stream.handle());
  });
  return std::make_shared<NcclWork>(impl_, state);
}

WorkPtr ProcessGroupNccl::broadcast(const Tensor& tensor, const BroadcastOptions& options) {
  check_tensor(*impl_, "broadcast", tensor, "input");
  TRIREME_CHECK(options.root >= 0 && options.root < size_, "nccl broadcast: root ", options.root,
                " is outside a group of ", size_);
  std::string op = str_cat("broadcast(root ", options.root, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  ncclDataType_t type = nccl_dtype(tensor.dtype(), op, false);
  auto state = impl_->issue(op, impl_->timeout_for(options.timeout), {tensor}, [&] {
    if (tensor.numel() == 0) return ncclSuccess;
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type,
                         options.root, impl_->comm, impl_->stream.handle());
  });
  return std::make_shared<NcclWork>(impl_, state);
}

WorkPtr ProcessGroupNccl::all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options) {
  check_tensor(*impl_, "all_gather", input, "input");
  check_tensor(*impl_, "all_gather", output, "output");
  check_all_gather_operands(output, input);
  std::string op = str_cat("all_gather(", input.sizes(), " ", input.dtype(), ")");
  ncclDataType_t type = nccl_dtype(input.dtype(), op, false);
  if (impl_->peer_rs_ag) {
    return issue_on_peer(impl_, op, impl_->timeout_for(options.timeout), {output, input},
                         [&](PeerAllReduce& peer, cudaStream_t s) { peer.all_gather(output, input, s); });
  }
  auto state = impl_->issue(op, impl_->timeout_for(options.timeout), {output, input}, [&] {
    if (input.numel() == 0) return ncclSuccess;
    return ncclAllGather(input.data_ptr(), output.data_ptr(), static_cast<size_t>(input.numel()), type, impl_->comm,
                         impl_->stream.handle());
  });
  return std::make_shared<NcclWork>(impl_, state);
}

WorkPtr ProcessGroupNccl::reduce_scatter(const Tensor& output, const Tensor& input,
                                         const ReduceScatterOptions& options) {
  check_tensor(*impl_, "reduce_scatter", input, "input");
  check_tensor(*impl_, "reduce_scatter", output, "output");
  check_reduce_scatter_operands(output, input);
  std::string op = str_cat("reduce_scatter(", reduce_op_name(options.op), ", ", input.sizes(), " ", input.dtype(), ")");
  ncclDataType_t type = nccl_dtype(input.dtype(), op, true);
  if (impl_->peer_rs_ag && PeerAllReduce::accepts(input, options.op)) {
    return issue_on_peer(impl_, op, impl_->timeout_for(options.timeout), {output, input},
                         [&](PeerAllReduce& peer, cudaStream_t s) { peer.reduce_scatter(output, input, options.op, s); });
  }
  auto state = impl_->issue(op, impl_->timeout_for(options.timeout), {output, input}, [&] {
    if (output.numel() == 0) return ncclSuccess;
    return ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()), type,
                             nccl_reduce_op(options.op), impl_->comm, impl_->stream.handle());
  });
  return std::make_shared<NcclWork>(impl_, state);
}

namespace {

// What a staged op on the copy engines holds (Notes [staged reduce-scatter], [staged
// all-gather]). One abandoned before finish() (an exception between its steps) is finished by
// its destructor anyway, so the peers, which take the ops in order, stay in step.
struct PeerStagedOp {
  std::shared_ptr<ProcessGroupNccl::Impl> impl;
  std::string what;
  milliseconds timeout;
  Tensor output, input;
  bool finished = false;
};

// Note [staged reduce-scatter] on the copy engines: each chunk_written(j) is an op of its own on
// the group's stream (after the caller's stream, so after chunk j's writes) that pushes chunk j
// to rank j; finish() waits for the others' chunks and sums, on the caller's stream. All go
// through the group's watchdog like any op, so a peer that never comes is a timeout naming the op.
class PeerStagedReduceScatter : public StagedReduceScatter {
 public:
  PeerStagedReduceScatter(PeerStagedOp op, ReduceOp reduce) : s_(std::move(op)), reduce_(reduce) {
    s_.impl->peer->begin_staged_reduce_scatter();
  }
  ~PeerStagedReduceScatter() override {
    if (s_.finished) return;
    try {
      finish(Tensor(), Tensor());
    } catch (...) {
    }
  }
  bool sends_early() const override { return true; }
  bool adds_bias() const override { return true; }
  void chunk_written(int j) override {
    issue_on_peer(s_.impl, str_cat(s_.what, " chunk ", j), s_.timeout, {s_.input},
                  [&](PeerAllReduce& peer, cudaStream_t st) { peer.send_staged_chunk(s_.input, j, st); });
  }
  void chunk_part_written(int j, int64_t end) override {
    issue_on_peer(s_.impl, str_cat(s_.what, " chunk ", j, " to ", end), s_.timeout, {s_.input},
                  [&](PeerAllReduce& peer, cudaStream_t st) { peer.send_staged_part(s_.input, j, end, st); });
  }
  // The wait (and with more than two ranks the sum) on the caller's stream, which reads it next.
  Tensor others_sum() override {
    TRIREME_CHECK(!s_.finished && !summed_, "nccl ", s_.what, ": others_sum() after finish() or twice");
    TRIREME_CHECK(reduce_ == ReduceOp::sum, "nccl ", s_.what, ": others_sum() is for sums only");
    summed_ = true;
    const bool two = s_.impl->global_ranks.size() == 2;
    if (!two) scratch_ = Tensor::empty(s_.output.sizes(), s_.output.dtype(), s_.output.device());
    const void* at = nullptr;
    std::vector<Tensor> keep{s_.input};
    if (!two) keep.push_back(scratch_);
    s_.impl->issue_on_caller_stream(str_cat(s_.what, " others' sum"), s_.timeout, std::move(keep), [&](cudaStream_t st) {
      at = s_.impl->peer->staged_others_sum(s_.input, scratch_, st);
      return ncclSuccess;
    });
    return two ? Tensor::borrowed(const_cast<void*>(at), s_.output.sizes(), s_.output.dtype(), s_.output.device())
               : scratch_;
  }
  // The sum runs on the caller's stream, which needs it next (Impl::issue_on_caller_stream).
  WorkPtr finish(const Tensor& bias, const Tensor& residual) override {
    if (summed_) {  // the caller summed: free the slots after its reads, on the group's stream
      TRIREME_CHECK(!bias.defined() && !residual.defined(), "nccl ", s_.what,
                    ": finish() after others_sum() adds no bias or residual");
      s_.finished = true;
      return issue_on_peer(s_.impl, str_cat(s_.what, " release"), s_.timeout, {s_.input},
                           [&](PeerAllReduce& peer, cudaStream_t st) { peer.release_staged_reduce_scatter(st); });
    }
    s_.finished = true;
    std::vector<Tensor> keep{s_.output, s_.input};
    if (bias.defined()) keep.push_back(bias);
    if (residual.defined()) keep.push_back(residual);
    auto state = s_.impl->issue_on_caller_stream(s_.what, s_.timeout, std::move(keep), [&](cudaStream_t st) {
      s_.impl->peer->finish_staged_reduce_scatter(s_.output, s_.input, reduce_, st, bias, residual,
                                                  s_.impl->stream.handle());
      return ncclSuccess;
    });
    return std::make_shared<NcclWork>(s_.impl, state);
  }

 private:
  PeerStagedOp s_;
  ReduceOp reduce_;
  bool summed_ = false;
  Tensor scratch_;  // the others' sum with more than two ranks
};

// Note [staged all-gather] on the copy engines: the first op pushes this rank's input to every
// peer and waits for theirs; arrived(q) lends rank q's staging slot, its reads queued on the
// caller's stream after that op; a second op copies everything into the output meanwhile (the
// copy engines, beside those reads); finish() is a third, after the reads, that frees the slots.
class PeerStagedAllGather : public StagedAllGather {
 public:
  explicit PeerStagedAllGather(PeerStagedOp op) : s_(std::move(op)) {
    arrival_ = issue_on_peer(s_.impl, s_.what, s_.timeout, {s_.input},
                             [&](PeerAllReduce& peer, cudaStream_t st) { peer.begin_staged_all_gather(s_.input, st); });
    if (s_.output.defined()) {
      issue_on_peer(s_.impl, str_cat(s_.what, " copies"), s_.timeout, {s_.output, s_.input},
                    [&](PeerAllReduce& peer, cudaStream_t st) { peer.fill_staged_all_gather(s_.output, s_.input, st); });
    }
  }
  ~PeerStagedAllGather() override {
    if (s_.finished) return;
    try {
      finish();
    } catch (...) {
    }
  }
  void keep_others(const Tensor& others) override {
    TRIREME_CHECK(!s_.finished, "nccl ", s_.what, ": keep_others() after finish()");
    const int64_t want = (s_.impl->global_ranks.size() - 1) * size_t(s_.input.numel());
    TRIREME_CHECK(others.is_contiguous() && others.device() == s_.input.device() && others.dtype() == s_.input.dtype() &&
                      others.numel() == want,
                  "nccl ", s_.what, ": keep_others needs a contiguous ", s_.input.dtype(), " tensor of ", want,
                  " elements on ", s_.input.device(), ", got ", others.sizes(), " ", others.dtype(), " on ",
                  others.device());
    issue_on_peer(s_.impl, str_cat(s_.what, " kept"), s_.timeout, {others},
                  [&](PeerAllReduce& peer, cudaStream_t st) { peer.fill_staged_others(others, st); });
  }
  Tensor arrived(int rank) override {
    TRIREME_CHECK(!s_.finished, "nccl ", s_.what, ": arrived() after finish()");
    if (rank == s_.impl->rank) return s_.input;
    arrival_->wait();
    return Tensor::borrowed(s_.impl->peer->staged_slot(rank), s_.input.sizes(), s_.input.dtype(), s_.input.device());
  }
  WorkPtr finish() override {
    s_.finished = true;
    return issue_on_peer(s_.impl, str_cat(s_.what, " finish"), s_.timeout, {s_.input},
                         [&](PeerAllReduce& peer, cudaStream_t st) { peer.finish_staged_all_gather(st); });
  }

 private:
  PeerStagedOp s_;
  WorkPtr arrival_;
};

}  // namespace

std::unique_ptr<StagedAllGather> ProcessGroupNccl::all_gather_staged(const Tensor& output, const Tensor& input,
                                                                     const AllGatherOptions& options) {
  check_tensor(*impl_, "all_gather", input, "input");
  if (output.defined()) {
    check_tensor(*impl_, "all_gather", output, "output");
    check_all_gather_operands(output, input);
  }
  if (!impl_->peer_rs_ag || !impl_->peer->can_stage_gather(input))
    return ProcessGroup::all_gather_staged(output, input, options);
  return std::make_unique<PeerStagedAllGather>(PeerStagedOp{
      impl_, str_cat("all_gather(", input.sizes(), " ", input.dtype(), ", staged)"), impl_->timeout_for(options.timeout),
      output, input});
}

std::unique_ptr<StagedReduceScatter> ProcessGroupNccl::reduce_scatter_staged(const Tensor& output,
                                                                             const Tensor& input,
                                                                             const ReduceScatterOptions& options) {
  check_tensor(*impl_, "reduce_scatter", input, "input");
  check_tensor(*impl_, "reduce_scatter", output, "output");
  check_reduce_scatter_operands(output, input);
  if (!impl_->peer_rs_ag || !impl_->peer->can_stage(output, input, options.op))
    return ProcessGroup::reduce_scatter_staged(output, input, options);
  std::string op = str_cat("reduce_scatter(", reduce_op_name(options.op), ", ", input.sizes(), " ", input.dtype(),
                           ", staged)");
  return std::make_unique<PeerStagedReduceScatter>(
      PeerStagedOp{impl_, op, impl_->timeout_for(options.timeout), output, input}, options.op);
}

WorkPtr ProcessGroupNccl::all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options) {
  check_tensor(*impl_, "all_to_all", input, "input");
  check_tensor(*impl_, "all_to_all", output, "output");
  check_all_to_all_operands(output, input);
  std::string op = str_cat("all_to_all(", input.sizes(), " ", input.dtype(), ")");
  ncclDataType_t type = nccl_dtype(input.dtype(), op, false);
  auto state = impl_->issue(op, impl_->timeout_for(options.timeout), {output, input}, [&] {
    if (input.numel() == 0) return ncclSuccess;
    auto chunk = static_cast<size_t>(input.numel() / size_);
    size_t bytes = chunk * input.element_size();
    auto* in = static_cast<char*>(input.data_ptr());
    auto* out = static_cast<char*>(output.data_ptr());
    ncclResult_t result = ncclGroupStart();
    for (int peer = 0; peer < size_ && (result == ncclSuccess || result == ncclInProgress); ++peer) {
      result = ncclSend(in + bytes * static_cast<size_t>(peer), chunk, type, peer, impl_->comm, impl_->stream.handle());
      if (result == ncclSuccess || result == ncclInProgress)
        result = ncclRecv(out + bytes * static_cast<size_t>(peer), chunk, type, peer, impl_->comm,
                          impl_->stream.handle());
    }
    ncclResult_t end = ncclGroupEnd();
    return result == ncclSuccess || result == ncclInProgress ? end : result;
  });
  return std::make_shared<NcclWork>(impl_, state);
}

WorkPtr ProcessGroupNccl::barrier(const BarrierOptions& options) {
  Tensor buffer = impl_->barrier_buffer;
  auto state = impl_->issue("barrier", impl_->timeout_for(options.timeout), {buffer}, [&] {
    return ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), 1, ncclFloat32, ncclSum, impl_->comm,
                         impl_->stream.handle());
  });
  return std::make_shared<NcclWork>(impl_, state);
}

namespace {

// Queues a send or recv (Note [nccl send/recv]) after an event on the caller's stream; `alone`:
// starts it now, in a group of its own, after the transfers queued before it.
std::shared_ptr<OpState> queue_transfer(ProcessGroupNccl::Impl& impl, std::string what, const Tensor& tensor,
                                        bool is_send, int peer, milliseconds timeout, bool alone) {
  nccl_dtype(tensor.dtype(), what, false);  // fails now on an unsupported dtype
  auto op = std::make_shared<OpState>();
  op->what = std::move(what);
  op->tensors = {tensor};
  op->timeout = timeout;
  op->is_send = is_send;
  op->peer = peer;
  std::lock_guard lock(impl.mutex);
  impl.check_usable_locked(op->what);
  cuda::DeviceGuard guard(impl.device);
  op->events = impl.events;
  op->ready_event = impl.events->take();
  op->done_event = impl.events->take();
  TRIREME_CUDA_CHECK(cudaEventRecord(op->ready_event, cuda::current_stream(impl.device).handle()));
  if (alone) impl.flush_locked();
  impl.queued.push_back(op);
  if (alone) impl.flush_locked();
  return op;
}

}  // namespace

WorkPtr ProcessGroupNccl::send(const Tensor& tensor, int dst, const SendRecvOptions& options) {
  check_tensor(*impl_, "send", tensor, "input");
  TRIREME_CHECK(dst >= 0 && dst < size_ && dst != rank_, "nccl send: destination rank ", dst,
                " must be another rank of this group of ", size_, " (this is rank ", rank_, ")");
  TRIREME_CHECK(options.tag >= 0, "nccl send: tag ", options.tag, " must be >= 0");
  std::string op = str_cat("send(to rank ", dst, ", tag ", options.tag, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  auto state = queue_transfer(*impl_, op, tensor, true, dst, impl_->timeout_for(options.timeout), options.alone);
  return std::make_shared<NcclWork>(impl_, state);
}

WorkPtr ProcessGroupNccl::recv(const Tensor& tensor, int src, const SendRecvOptions& options) {
  check_tensor(*impl_, "recv", tensor, "output");
  TRIREME_CHECK(src >= 0 && src < size_ && src != rank_, "nccl recv: source rank ", src,
                " must be another rank of this group of ", size_, " (this is rank ", rank_, ")");
  TRIREME_CHECK(options.tag >= 0, "nccl recv: tag ", options.tag, " must be >= 0");
  std::string op = str_cat("recv(from rank ", src, ", tag ", options.tag, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  auto state = queue_transfer(*impl_, op, tensor, false, src, impl_->timeout_for(options.timeout), options.alone);
  return std::make_shared<NcclWork>(impl_, state);
}

std::shared_ptr<ProcessGroup> ProcessGroupNccl::new_group(const std::vector<int>& ranks, const std::string& name) {
  TRIREME_CHECK(!ranks.empty(), "nccl new_group '", name, "': no ranks given");
  std::vector<int> global;
  int my_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    TRIREME_CHECK(ranks[i] >= 0 && ranks[i] < size_, "nccl new_group '", name, "': rank ", ranks[i],
                  " is outside this group of ", size_);
    for (size_t j = 0; j < i; ++j)
      TRIREME_CHECK(ranks[j] != ranks[i], "nccl new_group '", name, "': rank ", ranks[i], " is listed twice");
    if (ranks[i] == rank_) my_rank = static_cast<int>(i);
    global.push_back(global_rank(ranks[i]));
  }
  TRIREME_CHECK(my_rank >= 0, "nccl new_group '", name, "': only its members create a group, and rank ", rank_,
                " is not in ", std::vector<int64_t>(ranks.begin(), ranks.end()));
  NcclOptions options = impl_->options;
  options.device = impl_->device;
  int instance = impl_->groups_named[name]++;
  std::string ranks_key;
  for (int g : global) ranks_key += (ranks_key.empty() ? "" : ",") + std::to_string(g);
  options.prefix = str_cat(impl_->options.prefix, name, "#", instance, "[", ranks_key, "]/");
  return std::shared_ptr<ProcessGroup>(new ProcessGroupNccl(impl_->store, my_rank, global, options));
}

}  // namespace trireme::dist

#else  // !TRIREME_WITH_NCCL

namespace trireme::dist {

bool nccl_is_built() { return false; }

struct ProcessGroupNccl::Impl {};

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, int size, NcclOptions options)
    : ProcessGroup(rank, size) {
  TRIREME_FAIL("ProcessGroupNccl: trireme was built without NCCL (configure with CUDA and NCCL installed; "
               "TRIREME_WITH_NCCL is off)");
}
ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<StoreClient> store, int rank, std::vector<int> global_ranks,
                                   NcclOptions options)
    : ProcessGroupNccl(std::move(store), rank, static_cast<int>(global_ranks.size()), std::move(options)) {}
ProcessGroupNccl::~ProcessGroupNccl() = default;
int ProcessGroupNccl::device() const { return -1; }
cuda::Stream ProcessGroupNccl::stream() const { return cuda::Stream(); }
bool ProcessGroupNccl::uses_peer_all_reduce() const { return false; }
bool ProcessGroupNccl::uses_peer_rs_ag() const { return false; }
std::string ProcessGroupNccl::peer_all_reduce_why_not() const { return "trireme was built without NCCL"; }
void ProcessGroupNccl::abort(const std::string&) {}
WorkPtr ProcessGroupNccl::all_reduce(const Tensor& t, const AllReduceOptions& o) { return ProcessGroup::all_reduce(t, o); }
WorkPtr ProcessGroupNccl::broadcast(const Tensor& t, const BroadcastOptions& o) { return ProcessGroup::broadcast(t, o); }
WorkPtr ProcessGroupNccl::all_gather(const Tensor& out, const Tensor& in, const AllGatherOptions& o) {
  return ProcessGroup::all_gather(out, in, o);
}
WorkPtr ProcessGroupNccl::reduce_scatter(const Tensor& out, const Tensor& in, const ReduceScatterOptions& o) {
  return ProcessGroup::reduce_scatter(out, in, o);
}
std::unique_ptr<StagedReduceScatter> ProcessGroupNccl::reduce_scatter_staged(const Tensor& out, const Tensor& in,
                                                                             const ReduceScatterOptions& o) {
  return ProcessGroup::reduce_scatter_staged(out, in, o);
}
std::unique_ptr<StagedAllGather> ProcessGroupNccl::all_gather_staged(const Tensor& out, const Tensor& in,
                                                                     const AllGatherOptions& o) {
  return ProcessGroup::all_gather_staged(out, in, o);
}
WorkPtr ProcessGroupNccl::all_to_all(const Tensor& out, const Tensor& in, const AllToAllOptions& o) {
  return ProcessGroup::all_to_all(out, in, o);
}
WorkPtr ProcessGroupNccl::send(const Tensor& t, int dst, const SendRecvOptions& o) { return ProcessGroup::send(t, dst, o); }
WorkPtr ProcessGroupNccl::recv(const Tensor& t, int src, const SendRecvOptions& o) { return ProcessGroup::recv(t, src, o); }
WorkPtr ProcessGroupNccl::barrier(const BarrierOptions& o) { return ProcessGroup::barrier(o); }
std::shared_ptr<ProcessGroup> ProcessGroupNccl::new_group(const std::vector<int>& ranks, const std::string& name) {
  return ProcessGroup::new_group(ranks, name);
}

}  // namespace trireme::dist

#endif  // TRIREME_WITH_NCCL
