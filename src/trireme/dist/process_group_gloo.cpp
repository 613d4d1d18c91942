// ProcessGroupGloo: Gloo collectives on CPU tensors, a worker thread that runs them in order,
// and errors that name the op and the rank that failed.
#include "trireme/dist/process_group_gloo.h"

#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "trireme/kernels/kernel_tape.h"

namespace trireme::dist {

namespace {

// Gloo's rendezvous reads and writes peer addresses through this interface; ours goes to the
// job's store under the group's prefix.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(StoreClient& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_.get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    store_.wait(prefixed, timeout);
  }

 private:
  StoreClient& store_;
  std::string prefix_;
  milliseconds timeout_;
};

// The Work of a collective queued on the group's worker thread.
class QueuedWork : public Work {
 public:
  bool is_completed() override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  void wait(milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    if (timeout.count() > 0) {
      TRIREME_CHECK(cv_.wait_for(lock, timeout, [&] { return done_; }), "Work::wait: ", what_,
                    " did not finish within ", timeout.count(), " ms");
    } else {
      cv_.wait(lock, [&] { return done_; });
    }
    if (error_) std::rethrow_exception(error_);
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = error;
      keep_alive_.clear();
    }
    cv_.notify_all();
  }
  std::string what_;
  std::vector<Tensor> keep_alive_;  // the tensors the op reads and writes

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Gloo's pairwise slots: collectives use small prefixes; send/recv use this one.
constexpr uint8_t kSendRecvSlotPrefix = 0x7e;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string default_hostname(const GlooOptions& options, const StoreClient& store) {
  if (!options.hostname.empty()) return options.hostname;
  if (const char* h = std::getenv("TRIREME_GLOO_HOST"); h && *h) return h;
  if (is_loopback(store.options().host)) return "127.0.0.1";
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

void check_tensor(const char* op, const Tensor& t, const char* which) {
  TRIREME_CHECK(t.defined(), "gloo ", op, ": the ", which, " tensor is undefined");
  TRIREME_CHECK(t.device().is_cpu(), "gloo ", op, ": the ", which, " tensor is on ", t.device(),
                "; gloo handles CPU tensors (CUDA tensors go through the nccl backend)");
  TRIREME_CHECK(t.is_contiguous(), "gloo ", op, ": the ", which, " tensor ", t.sizes(), " must be contiguous");
}

// out[i] = op(a[i], b[i]) in T's accumulation type; avg reduces as a sum (divided afterwards).
gloo::AllreduceOptions::Func reduce_function(DType dtype, ReduceOp op) {
  return dispatch_dtype(dtype, [&]<class T>() -> gloo::AllreduceOptions::Func {
    if (op == ReduceOp::max) {
      return [](void* out, const void* a, const void* b, size_t n) {
        auto* o = static_cast<T*>(out);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) o[i] = acc_t<T>(x[i]) < acc_t<T>(y[i]) ? y[i] : x[i];
      };
    }
    if (op == ReduceOp::min) {
      return [](void* out, const void* a, const void* b, size_t n) {
        auto* o = static_cast<T*>(out);
        auto* x = static_cast<const T*>(a);
        auto* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) o[i] = acc_t<T>(y[i]) < acc_t<T>(x[i]) ? y[i] : x[i];
      };
    }
    return [](void* out, const void* a, const void* b, size_t n) {
      auto* o = static_cast<T*>(out);
      auto* x = static_cast<const T*>(a);
      auto* y = static_cast<const T*>(b);
      if constexpr (std::is_same_v<T, bool>) {
        for (size_t i = 0; i < n; ++i) o[i] = x[i] || y[i];
      } else {
        for (size_t i = 0; i < n; ++i) o[i] = T(acc_t<T>(x[i]) + acc_t<T>(y[i]));
      }
    };
  });
}

void divide_in_place(void* data, DType dtype, int64_t n, int divisor) {
  dispatch_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      TRIREME_FAIL("gloo all_reduce: avg is not defined for bool tensors");
    } else {
      auto* p = static_cast<T*>(data);
      for (int64_t i = 0; i < n; ++i) p[i] = T(acc_t<T>(p[i]) / acc_t<T>(divisor));
    }
  });
}

// Gloo writes to its peers' sockets without MSG_NOSIGNAL, so a write to a peer that just died
// raises SIGPIPE, whose default action kills this process before Gloo can report the error.
// Like Python (and so PyTorch), ignore SIGPIPE: the failed write becomes an error instead. A
// handler the program installed itself is left alone.
void ignore_sigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

struct ProcessGroupGloo::Impl {
  ProcessGroupGloo* self = nullptr;
  std::shared_ptr<StoreClient> store;
  GlooOptions options;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::string name = "world";  // what errors call the group: "world", or new_group's name
  std::map<std::string, int> groups_named;  // how many child groups of each name were made here

  std::thread worker;
  std::mutex mutex;
  std::condition_variable queued;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<QueuedWork>>> queue;
  bool stopping = false;
  uint32_t next_tag = 0;  // only the worker thread touches it: same order on every rank

  milliseconds timeout_for(milliseconds t) const { return t.count() > 0 ? t : options.timeout; }

  // Runs fn on the worker thread; the Work reports its error.
  WorkPtr enqueue(std::string what, std::vector<Tensor> keep, std::function<void()> fn) {
    // A collective issued while a step is traced must be one of its nodes, or replays would skip it.
    if (KernelTape* tape = active_kernel_tape(); tape && !tape->in_kernel()) {
      TRIREME_FAIL("graph::trace: gloo ", what, " is not recorded in the traced step (dist/recorded_collective.h), "
                   "so a replay would skip it; train.mode = \"eager\" runs this layout");
    }
    auto work = std::make_shared<QueuedWork>();
    work->what_ = std::move(what);
    work->keep_alive_ = std::move(keep);
    {
      std::lock_guard lock(mutex);
      TRIREME_CHECK(!stopping, "gloo ", work->what_, ": the process group is being destroyed");
      queue.emplace_back(std::move(fn), work);
    }
    queued.notify_one();
    return work;
  }

  void worker_loop() {
    while (true) {
      std::unique_lock lock(mutex);
      queued.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      auto [fn, work] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      std::exception_ptr error;
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
      work->finish(error);
    }
  }

  // Turns a Gloo failure into an error naming the op, this rank and, when the store knows,
  // the rank that died (Note [store liveness]).
  [[noreturn]] void fail(const std::string& op, milliseconds timeout, const std::string& gloo_what) {
    std::string where = str_cat(op, " failed on ", self->describe_rank(self->rank()), " of the ", self->size(),
                                "-rank gloo group '", name, "'");
    bool timed_out = gloo_what.find("imed out") != std::string::npos;
    // A dead peer's sockets close at once, but the store may see its connection drop a little
    // after Gloo does: look a few times before deciding nobody died.
    std::vector<int> dead_in_group;
    for (int attempt = 0; attempt < (timed_out ? 1 : 20) && dead_in_group.empty(); ++attempt) {
      if (attempt) std::this_thread::sleep_for(milliseconds(50));
      try {
        for (int global : store->dead_ranks())
          for (int r = 0; r < self->size(); ++r)
            if (self->global_rank(r) == global) dead_in_group.push_back(r);
      } catch (const std::exception&) {
        break;  // the store is gone too (it lived in a rank that died): say what Gloo said
      }
    }
    std::string cause;
    if (!dead_in_group.empty()) {
      // The first to go is the likeliest cause; later ones may have failed because of it.
      cause = self->describe_rank(dead_in_group[0]) + " exited or was killed";
      for (size_t i = 1; i < dead_in_group.size(); ++i)
        cause += (i == 1 ? " (after it: " : ", ") + self->describe_rank(dead_in_group[i]);
      if (dead_in_group.size() > 1) cause += ")";
    } else if (timed_out) {
      cause = str_cat("timed out after ", timeout.count(), " ms (a peer is hung, slow, or never called ", op, ")");
    } else {
      cause = "a peer closed its connection";
    }
    TRIREME_FAIL(where, ": ", cause, " [gloo: ", gloo_what, "]");
  }

  // Runs a Gloo call, translating its exceptions.
  template <class Fn>
  void run(const std::string& op, milliseconds timeout, Fn&& fn) {
    try {
      fn();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(op, timeout, e.what());
    }
  }
};

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<StoreClient> store, int rank, int size, GlooOptions options)
    : ProcessGroupGloo(std::move(store), rank, [size] {
        std::vector<int> ranks(static_cast<size_t>(std::max(size, 0)));
        for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
        return ranks;
      }(), std::move(options)) {}

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<StoreClient> store, int rank, std::vector<int> global_ranks,
                                   GlooOptions options)
    : ProcessGroup(rank, static_cast<int>(global_ranks.size()), global_ranks), impl_(std::make_unique<Impl>()) {
  TRIREME_CHECK(store, "ProcessGroupGloo: a store is required");
  impl_->self = this;
  impl_->store = std::move(store);
  if (options.prefix.empty()) {
    const char* restart = std::getenv("TRIREME_RESTART_COUNT");
    options.prefix = str_cat("gloo/", restart ? restart : "0", "/world/");
  }
  impl_->options = options;
  ignore_sigpipe();

  // Workers started with different WORLD_SIZEs would wait for each other until the timeout, or
  // connect into a broken mesh: the first to arrive records the size and the others compare.
  std::string size_text = std::to_string(size_);
  std::string agreed = impl_->store->compare_set(options.prefix + "group_size", "", size_text);
  TRIREME_CHECK(agreed == size_text, "ProcessGroupGloo: ", describe_rank(rank), " was started for a group of ", size_,
                " ranks, but another rank of the same group was started for ", agreed,
                " (do all workers get the same WORLD_SIZE?)");

  gloo::transport::tcp::attr attr;
  attr.hostname = default_hostname(options, *impl_->store);
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    impl_->context = std::make_shared<gloo::rendezvous::Context>(rank, size_);
    impl_->context->setTimeout(options.timeout);
    GlooStore gloo_store(*impl_->store, options.prefix, options.timeout);
    impl_->context->connectFullMesh(gloo_store, device);
  } catch (const std::exception& e) {
    TRIREME_FAIL("ProcessGroupGloo: ", describe_rank(rank), " could not connect to the other ", size_ - 1,
                 " rank(s) of its group within ", options.timeout.count(), " ms (listening on ", attr.hostname,
                 "): ", e.what());
  }
  impl_->worker = std::thread([impl = impl_.get()] { impl->worker_loop(); });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->queued.notify_all();
  impl_->worker.join();  // finishes what was queued: each op ends by its timeout
}

WorkPtr ProcessGroupGloo::all_reduce(const Tensor& tensor, const AllReduceOptions& options) {
  check_tensor("all_reduce", tensor, "input");
  TRIREME_CHECK(!(options.op == ReduceOp::avg && tensor.dtype() == DType::boolean),
                "gloo all_reduce: avg is not defined for bool tensors");
  milliseconds timeout = impl_->timeout_for(options.timeout);
  std::string op = str_cat("all_reduce(", reduce_op_name(options.op), ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  return impl_->enqueue(op, {tensor}, [impl = impl_.get(), tensor, options, timeout, op, size = size_] {
    impl->run(op, timeout, [&] {
      gloo::AllreduceOptions o(impl->context);
      dispatch_dtype(tensor.dtype(), [&]<class T>() {
        o.setOutput<T>(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
      });
      o.setReduceFunction(reduce_function(tensor.dtype(), options.op));
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      if (tensor.numel() > 0) gloo::allreduce(o);
    });
    if (options.op == ReduceOp::avg) divide_in_place(tensor.data_ptr(), tensor.dtype(), tensor.numel(), size);
  });
}

WorkPtr ProcessGroupGloo::broadcast(const Tensor& tensor, const BroadcastOptions& options) {
  check_tensor("broadcast", tensor, "input");
  TRIREME_CHECK(options.root >= 0 && options.root < size_, "gloo broadcast: root ", options.root,
                " is outside a group of ", size_);
  milliseconds timeout = impl_->timeout_for(options.timeout);
  std::string op = str_cat("broadcast(root ", options.root, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  return impl_->enqueue(op, {tensor}, [impl = impl_.get(), tensor, options, timeout, op] {
    impl->run(op, timeout, [&] {
      gloo::BroadcastOptions o(impl->context);
      o.setOutput<char>(static_cast<char*>(tensor.data_ptr()), tensor.numel() * tensor.element_size());
      o.setRoot(options.root);
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      if (tensor.numel() > 0) gloo::broadcast(o);
    });
  });
}

WorkPtr ProcessGroupGloo::all_gather(const Tensor& output, const Tensor& input, const AllGatherOptions& options) {
  check_tensor("all_gather", input, "input");
  check_tensor("all_gather", output, "output");
  check_all_gather_operands(output, input);
  milliseconds timeout = impl_->timeout_for(options.timeout);
  std::string op = str_cat("all_gather(", input.sizes(), " ", input.dtype(), ")");
  return impl_->enqueue(op, {output, input}, [impl = impl_.get(), output, input, timeout, op] {
    impl->run(op, timeout, [&] {
      size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
      gloo::AllgatherOptions o(impl->context);
      o.setInput<char>(static_cast<char*>(input.data_ptr()), bytes);
      o.setOutput<char>(static_cast<char*>(output.data_ptr()), bytes * static_cast<size_t>(impl->self->size()));
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      if (bytes > 0) gloo::allgather(o);
    });
  });
}

// Gloo's reduce-scatter is an old fixed-sum algorithm; an all-reduce of a copy followed by
// taking this rank's chunk gives every ReduceOp at twice the traffic, which is fine on CPU.
WorkPtr ProcessGroupGloo::reduce_scatter(const Tensor& output, const Tensor& input,
                                         const ReduceScatterOptions& options) {
  check_tensor("reduce_scatter", input, "input");
  check_tensor("reduce_scatter", output, "output");
  check_reduce_scatter_operands(output, input);
  TRIREME_CHECK(!(options.op == ReduceOp::avg && input.dtype() == DType::boolean),
                "gloo reduce_scatter: avg is not defined for bool tensors");
  milliseconds timeout = impl_->timeout_for(options.timeout);
  std::string op = str_cat("reduce_scatter(", reduce_op_name(options.op), ", ", input.sizes(), " ", input.dtype(), ")");
  return impl_->enqueue(op, {output, input}, [impl = impl_.get(), output, input, options, timeout, op, rank = rank_,
                                              size = size_] {
    size_t chunk = static_cast<size_t>(output.numel()) * output.element_size();
    std::vector<char> all(chunk * static_cast<size_t>(size));
    if (!all.empty()) std::memcpy(all.data(), input.data_ptr(), all.size());
    impl->run(op, timeout, [&] {
      gloo::AllreduceOptions o(impl->context);
      dispatch_dtype(input.dtype(), [&]<class T>() {
        o.setOutput<T>(reinterpret_cast<T*>(all.data()), static_cast<size_t>(input.numel()));
      });
      o.setReduceFunction(reduce_function(input.dtype(), options.op));
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      if (!all.empty()) gloo::allreduce(o);
    });
    if (chunk) std::memcpy(output.data_ptr(), all.data() + chunk * static_cast<size_t>(rank), chunk);
    if (options.op == ReduceOp::avg) divide_in_place(output.data_ptr(), output.dtype(), output.numel(), size);
  });
}

WorkPtr ProcessGroupGloo::all_to_all(const Tensor& output, const Tensor& input, const AllToAllOptions& options) {
  check_tensor("all_to_all", input, "input");
  check_tensor("all_to_all", output, "output");
  check_all_to_all_operands(output, input);
  milliseconds timeout = impl_->timeout_for(options.timeout);
  std::string op = str_cat("all_to_all(", input.sizes(), " ", input.dtype(), ")");
  return impl_->enqueue(op, {output, input}, [impl = impl_.get(), output, input, timeout, op] {
    impl->run(op, timeout, [&] {
      size_t bytes = static_cast<size_t>(input.numel()) * input.element_size();
      gloo::AlltoallOptions o(impl->context);
      o.setInput<char>(static_cast<char*>(input.data_ptr()), bytes);
      o.setOutput<char>(static_cast<char*>(output.data_ptr()), bytes);
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      if (bytes > 0) gloo::alltoall(o);
    });
  });
}

WorkPtr ProcessGroupGloo::barrier(const BarrierOptions& options) {
  milliseconds timeout = impl_->timeout_for(options.timeout);
  return impl_->enqueue("barrier", {}, [impl = impl_.get(), timeout] {
    impl->run("barrier", timeout, [&] {
      gloo::BarrierOptions o(impl->context);
      o.setTag(impl->next_tag++);
      o.setTimeout(timeout);
      gloo::barrier(o);
    });
  });
}

namespace {

// A send or recv: posted when issued, completed in wait().
class PointToPointWork : public Work {
 public:
  PointToPointWork(ProcessGroupGloo::Impl* impl, std::unique_ptr<gloo::transport::UnboundBuffer> buffer, Tensor tensor,
                   bool is_send, std::string op, milliseconds timeout)
      : impl_(impl), buffer_(std::move(buffer)), tensor_(std::move(tensor)), is_send_(is_send), op_(std::move(op)),
        timeout_(timeout) {}
  bool is_completed() override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  void wait(milliseconds timeout) override;

 private:
  ProcessGroupGloo::Impl* impl_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  Tensor tensor_;
  bool is_send_;
  std::string op_;
  milliseconds timeout_;
  std::mutex mutex_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

void PointToPointWork::wait(milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (!done_) {
    milliseconds t = timeout.count() > 0 ? std::min(timeout, timeout_) : timeout_;
    try {
      impl_->run(op_, t, [&] {
        bool completed = is_send_ ? buffer_->waitSend(t) : buffer_->waitRecv(t);
        TRIREME_CHECK(completed, op_, " was aborted");
      });
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
    buffer_.reset();
    tensor_ = Tensor();
  }
  if (error_) std::rethrow_exception(error_);
}

WorkPtr ProcessGroupGloo::send(const Tensor& tensor, int dst, const SendRecvOptions& options) {
  check_tensor("send", tensor, "input");
  TRIREME_CHECK(dst >= 0 && dst < size_ && dst != rank_, "gloo send: destination rank ", dst,
                " must be another rank of this group of ", size_, " (this is rank ", rank_, ")");
  TRIREME_CHECK(options.tag >= 0, "gloo send: tag ", options.tag, " must be >= 0");
  std::string op = str_cat("send(to rank ", dst, ", tag ", options.tag, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  auto buffer = impl_->context->createUnboundBuffer(tensor.data_ptr(), tensor.numel() * tensor.element_size());
  buffer->send(dst, gloo::Slot::build(kSendRecvSlotPrefix, static_cast<uint32_t>(options.tag)));
  return std::make_shared<PointToPointWork>(impl_.get(), std::move(buffer), tensor, true, op,
                                            impl_->timeout_for(options.timeout));
}

WorkPtr ProcessGroupGloo::recv(const Tensor& tensor, int src, const SendRecvOptions& options) {
  check_tensor("recv", tensor, "output");
  TRIREME_CHECK(src >= 0 && src < size_ && src != rank_, "gloo recv: source rank ", src,
                " must be another rank of this group of ", size_, " (this is rank ", rank_, ")");
  TRIREME_CHECK(options.tag >= 0, "gloo recv: tag ", options.tag, " must be >= 0");
  std::string op = str_cat("recv(from rank ", src, ", tag ", options.tag, ", ", tensor.sizes(), " ", tensor.dtype(), ")");
  auto buffer = impl_->context->createUnboundBuffer(tensor.data_ptr(), tensor.numel() * tensor.element_size());
  buffer->recv(src, gloo::Slot::build(kSendRecvSlotPrefix, static_cast<uint32_t>(options.tag)));
  return std::make_shared<PointToPointWork>(impl_.get(), std::move(buffer), tensor, false, op,
                                            impl_->timeout_for(options.timeout));
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::new_group(const std::vector<int>& ranks, const std::string& name) {
  TRIREME_CHECK(!ranks.empty(), "gloo new_group '", name, "': no ranks given");
  std::vector<int> global;
  int my_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    TRIREME_CHECK(ranks[i] >= 0 && ranks[i] < size_, "gloo new_group '", name, "': rank ", ranks[i],
                  " is outside this group of ", size_);
    for (size_t j = 0; j < i; ++j) TRIREME_CHECK(ranks[j] != ranks[i], "gloo new_group '", name, "': rank ", ranks[i], " is listed twice");
    if (ranks[i] == rank_) my_rank = static_cast<int>(i);
    global.push_back(global_rank(ranks[i]));
  }
  TRIREME_CHECK(my_rank >= 0, "gloo new_group '", name, "': only its members create a group, and rank ", rank_,
                " is not in ", std::vector<int64_t>(ranks.begin(), ranks.end()));
  GlooOptions options = impl_->options;
  int instance = impl_->groups_named[name]++;
  std::string ranks_key;
  for (int g : global) ranks_key += (ranks_key.empty() ? "" : ",") + std::to_string(g);
  options.prefix = str_cat(impl_->options.prefix, name, "#", instance, "[", ranks_key, "]/");
  auto child = std::shared_ptr<ProcessGroupGloo>(new ProcessGroupGloo(impl_->store, my_rank, global, options));
  child->impl_->name = name;
  return child;
}

}  // namespace trireme::dist
