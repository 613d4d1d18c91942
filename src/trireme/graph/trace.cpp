// The tracer: a KernelTape and StorageObserver installed on this thread for one run of the step.
#include "trireme/graph/trace.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "trireme/core/storage.h"
#include "trireme/core/trace_hook.h"
#include "trireme/kernels/kernel_tape.h"

namespace trireme::graph {
namespace {

struct BufferState {
  std::weak_ptr<Storage> weak;
  uint64_t writes = 0;
  int first_writer = -1, last_writer = -1;
  int first_value = -1;
};

class Tracer final : public KernelTape, public StorageObserver {
 public:
  explicit Tracer(const TraceOptions& options) : options_(options) {}

  Graph graph;

  void bind_inputs(const std::vector<Tensor>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& t = inputs[i];
      TRIREME_CHECK(t.defined(), "graph::trace: input ", i, " is undefined");
      auto it = buffer_of_.find(t.storage().get());
      TRIREME_CHECK(it == buffer_of_.end(), "graph::trace: inputs ", graph.buffers[size_t(it->second)].input, " and ", i,
                    " share memory; pass one of them, or copies");
      int b = add_buffer(t.storage(), BufferKind::input);
      graph.buffers[size_t(b)].input = int(i);
      graph.inputs.push_back(value_of(t));
    }
  }

  // ---- KernelTape ----
  bool record(KernelCallRecord call) override {
    Node n;
    n.op = std::string(call.op);
    n.device = call.device;
    n.dtype = call.dtype;
    n.kernel_type = call.kernel_type;
    n.kernel = call.kernel;
    n.attrs = std::move(call.attrs);
    n.attrs_comparable = call.attrs_comparable;
    n.pinned = call.pinned;
    n.recomputed = call.recomputed;
    n.host_args = std::move(call.args);
    n.invoke = std::move(call.invoke);
    const int index = int(graph.nodes.size());
    for (size_t i = 0; i < call.tensors.size(); ++i) {
      const Tensor& t = *call.tensors[i];
      n.written.push_back(call.written[i]);
      if (!t.defined()) {
        n.args.push_back(-1);
        n.read_versions.push_back(0);
        continue;
      }
      const int v = value_of(t);
      n.args.push_back(v);
      n.read_versions.push_back(state_[size_t(graph.values[size_t(v)].buffer)].writes);
    }
    for (size_t i = 0; i < n.args.size(); ++i) {
      if (!n.written[i] || n.args[i] < 0) continue;
      BufferState& s = state_[size_t(graph.values[size_t(n.args[i])].buffer)];
      ++s.writes;
      if (s.first_writer < 0) s.first_writer = index;
      s.last_writer = index;
    }
    if (pending_refresh_) {
      TRIREME_CHECK(pending_type_ == n.kernel_type, "graph::trace: a refresh of the next kernel call's arguments was "
                    "registered for another kernel than op '", n.op, "' that came next");
      n.refresh.push_back(std::move(pending_refresh_));
      pending_refresh_ = nullptr;
      n.dynamic = true;
    }
    for (uint64_t* a : call.u64_args) {
      auto it = u64_bindings_.find(*a);
      if (it != u64_bindings_.end()) n.u64_bindings.emplace_back(a, it->second);
    }
    if (!n.u64_bindings.empty()) n.dynamic = true;
    const bool random = std::find(options_.random_ops.begin(), options_.random_ops.end(), n.op) != options_.random_ops.end();
    TRIREME_CHECK(!random || !n.u64_bindings.empty(), "graph::trace: op '", n.op,
                  "' draws random numbers from a stream that is not an input of the trace, so every replay would "
                  "draw the same ones; bind its stream with KernelTape::bind_u64 (nn::Dropout does) or run it eagerly");
    graph.nodes.push_back(std::move(n));
    return true;
  }

  void begin_kernel() override { ++in_kernel_; }
  void end_kernel() override { --in_kernel_; }
  bool in_kernel() const override { return in_kernel_ > 0; }

  void refresh_next_call(std::type_index kernel_type, std::function<void(void*)> refresh) override {
    pending_type_ = kernel_type;
    pending_refresh_ = std::move(refresh);
  }

  void bind_u64(uint64_t traced_value, std::function<uint64_t()> value_now) override {
    auto [it, fresh] = u64_bindings_.emplace(traced_value, int(graph.u64_sources.size()));
    if (fresh) graph.u64_sources.push_back(std::move(value_now));
    else graph.u64_sources[size_t(it->second)] = std::move(value_now);
  }

  void on_replay(std::function<void()> host_step) override { graph.host_steps.push_back(std::move(host_step)); }

  // ---- StorageObserver ----
  void on_alloc(const Storage& s) override {
    born_[&s] = s.nbytes();
    live_ += s.nbytes();
    peak_ = std::max(peak_, live_);
  }

  void on_free(const Storage& s) override {
    auto it = born_.find(&s);
    if (it != born_.end()) {
      live_ -= it->second;
      born_.erase(it);
    }
    host_written_.erase(&s);
    buffer_of_.erase(&s);  // the address may come back as another storage
  }

  void on_host_access(const Storage& s, const char* what) override {
    if (in_kernel()) return;
    auto it = buffer_of_.find(&s);
    if (it == buffer_of_.end()) {
      if (born_.count(&s)) host_written_.insert(&s);  // filled by host code: a constant of the step
      return;
    }
    const BufferState& st = state_[size_t(it->second)];
    TRIREME_CHECK(st.writes == 0, "graph::trace: ", what, " reads a tensor computed inside the traced step (by op '",
                  graph.nodes[size_t(st.last_writer)].op, "'), so its value would be baked into the graph; return "
                  "the tensor as an output of the step and read it after the replay, or run this step eagerly");
  }

  void finish(const std::vector<Tensor>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      TRIREME_CHECK(outputs[i].defined(), "graph::trace: output ", i, " of the traced step is undefined");
      const int v = value_of(outputs[i]);
      Buffer& b = graph.buffers[size_t(graph.values[size_t(v)].buffer)];
      if (b.kind == BufferKind::intermediate) b.kind = BufferKind::output;
      graph.outputs.push_back(v);
    }
    // A tensor the step created that outlives it is state the step created: a replay would create
    // it again (zero an optimizer's moments every step, say), so it is refused, by name.
    std::vector<bool> collective_arg(graph.buffers.size(), false);
    for (const Node& n : graph.nodes) {
      if (n.kernel != nullptr) continue;  // a collective (dist/recorded_collective.h) has no kernel
      for (int v : n.args) {
        if (v >= 0) collective_arg[size_t(graph.values[size_t(v)].buffer)] = true;
      }
    }
    for (size_t i = 0; i < graph.buffers.size(); ++i) {
      if (graph.buffers[i].kind != BufferKind::intermediate || state_[i].weak.expired()) continue;
      // A collective's worker thread lets go of its tensors a moment after the collective ended.
      if (collective_arg[i]) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!state_[i].weak.expired() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (state_[i].weak.expired()) continue;
      }
      const BufferState& s = state_[i];
      const Value& v = graph.values[size_t(s.first_value)];
      TRIREME_FAIL("graph::trace: a ", dtype_name(v.dtype), " tensor of shape ", v.sizes, " created inside the traced "
                   "step", s.first_writer >= 0 ? str_cat(" (by op '", graph.nodes[size_t(s.first_writer)].op, "')") : "",
                   " is still alive after it, so every replay would create it again; create such state before "
                   "tracing (run the step once eagerly first), return the tensor as an output, or release it inside "
                   "the step (an output's autograd graph holds tensors too: return loss.detach())");
    }
    graph.eager_peak_bytes = peak_;
  }

 private:
  int add_buffer(const StoragePtr& s, BufferKind kind) {
    Buffer b;
    b.kind = kind;
    b.nbytes = s->nbytes();
    b.device = s->device();
    if (kind != BufferKind::intermediate) b.storage = s;
    const int id = int(graph.buffers.size());
    graph.buffers.push_back(std::move(b));
    BufferState st;
    st.weak = s;
    state_.push_back(st);
    buffer_of_[s.get()] = id;
    return id;
  }

  int buffer_for(const Tensor& t) {
    const StoragePtr& s = t.storage();
    auto it = buffer_of_.find(s.get());
    if (it != buffer_of_.end()) return it->second;
    BufferKind kind = BufferKind::captured;
    if (born_.count(s.get())) kind = host_written_.count(s.get()) ? BufferKind::constant : BufferKind::intermediate;
    return add_buffer(s, kind);
  }

  int value_of(const Tensor& t) {
    const int b = buffer_for(t);
    auto key = std::make_tuple(b, t.sizes(), t.strides(), t.offset(), t.dtype());
    auto it = value_ids_.find(key);
    if (it != value_ids_.end()) return it->second;
    const int id = int(graph.values.size());
    graph.values.push_back({b, t.sizes(), t.strides(), t.offset(), t.dtype()});
    if (state_[size_t(b)].first_value < 0) state_[size_t(b)].first_value = id;
    value_ids_.emplace(std::move(key), id);
    return id;
  }

  TraceOptions options_;
  std::vector<BufferState> state_;  // per buffer
  std::unordered_map<const Storage*, int> buffer_of_;
  std::unordered_map<const Storage*, size_t> born_;  // allocated during the trace, alive
  std::unordered_set<const Storage*> host_written_;
  std::map<std::tuple<int, Shape, Shape, int64_t, DType>, int> value_ids_;
  std::unordered_map<uint64_t, int> u64_bindings_;
  std::type_index pending_type_ = std::type_index(typeid(void));
  std::function<void(void*)> pending_refresh_;
  int in_kernel_ = 0;
  size_t live_ = 0, peak_ = 0;
};

// Installs the tracer on this thread for its lifetime.
class Installed {
 public:
  explicit Installed(Tracer& t) : tape_(active_kernel_tape()), observer_(storage_observer()) {
    TRIREME_CHECK(tape_ == nullptr, "graph::trace: a trace is already running on this thread");
    active_kernel_tape() = &t;
    storage_observer() = &t;
  }
  ~Installed() {
    active_kernel_tape() = tape_;
    storage_observer() = observer_;
  }

 private:
  KernelTape* tape_;
  StorageObserver* observer_;
};

}  // namespace

TraceResult trace(const StepFn& fn, const std::vector<Tensor>& inputs, const TraceOptions& options) {
  Tracer tracer(options);
  TraceResult r;
  {
    Installed installed(tracer);
    tracer.bind_inputs(inputs);
    r.outputs = fn(inputs);
    tracer.finish(r.outputs);
  }
  r.graph = std::move(tracer.graph);
  return r;
}

}  // namespace trireme::graph
