// The CUDA-graph replay of an Executable (see cuda_replay.h).
#include "trireme/graph/cuda_replay.h"

#ifdef TRIREME_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include "trireme/core/storage.h"
#include "trireme/cuda/allocator.h"
#include "trireme/cuda/check.h"
#include "trireme/cuda/device.h"
#include "trireme/cuda/graph_capture.h"
#include "trireme/cuda/stream.h"
#include "trireme/kernels/scalar_slots.h"
#endif

namespace trireme::graph {

#ifndef TRIREME_WITH_CUDA

std::unique_ptr<CudaReplay> CudaReplay::capture(Executable&, const std::vector<uint64_t>&) { return nullptr; }

#else

namespace {

// Room for the placed scalars of one refreshed call (AdamW's are 64 bytes in f64); a node that
// merged several calls (Node::calls) has room for each.
constexpr size_t kSlotBytesPerCall = 256;

// The scalars of the refreshed calls inside the graphs: one device buffer the captured kernels
// read, and its host copy, written by the wrappers before each launch (Note [scalars in device
// memory]). Each call's scalars start where its capture placed them (`cursor` is set to that
// before its refresh).
class SlotBuffer final : public ScalarSlots {
 public:
  SlotBuffer(size_t capacity, Device device)
      : host(capacity), device_copy(std::make_shared<Storage>(std::max<size_t>(capacity, 1), device)) {}

  const void* place(const void* bytes, size_t n, size_t align) override {
    cursor = (cursor + align - 1) / align * align;
    TRIREME_CHECK(cursor + n <= host.size(), "graph: a call placed more scalars in device memory than the ",
                  kSlotBytesPerCall, " bytes per merged call it has");
    std::memcpy(host.data() + cursor, bytes, n);
    const void* at = static_cast<const char*>(device_copy->data()) + cursor;
    cursor += n;
    used = std::max(used, cursor);
    ++placed;
    return capturing ? at : nullptr;
  }

  std::vector<unsigned char> host;
  StoragePtr device_copy;
  size_t cursor = 0, used = 0;
  int placed = 0;
  bool capturing = false;
};

class SlotsScope {
 public:
  explicit SlotsScope(ScalarSlots* slots) : previous_(active_scalar_slots()) { active_scalar_slots() = slots; }
  ~SlotsScope() { active_scalar_slots() = previous_; }
  SlotsScope(const SlotsScope&) = delete;
  SlotsScope& operator=(const SlotsScope&) = delete;

 private:
  ScalarSlots* previous_;
};

// The first line of an error's text, for a one-line log.
std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > 240 ? line.substr(0, 240) + "..." : line;
}

void refresh_host_args(const Node& n, const std::vector<uint64_t>& u64) {
  for (const auto& r : n.refresh) r(n.host_args.get());
  for (const auto& [arg, source] : n.u64_bindings) *arg = u64[size_t(source)];
}

}  // namespace

class CudaGraphReplay final : public CudaReplay {
 public:
  CudaGraphReplay(Executable& exe, int device) : exe_(exe), device_(device) {}

  ~CudaGraphReplay() override {
    cuda::DeviceGuard g(device_);
    cudaDeviceSynchronize();  // the graphs may still run; their memory goes after this
    cudaGetLastError();
  }

  // Binds the inputs and outputs to fixed buffers and plans which calls run outside; "" or why
  // the replay cannot be captured.
  std::string prepare() {
    const Graph& g = exe_.g_;
    outside_.resize(g.nodes.size());
    slot_at_.resize(g.nodes.size());
    size_t refreshed = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      outside_[i] = n.kernel == nullptr || !n.device.is_cuda();
      if (!outside_[i] && n.device.index != device_) return str_cat("its calls are on cuda:", device_, " and ", n.device);
      if (n.dynamic && !outside_[i]) refreshed += size_t(n.calls);
    }
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Value& in = g.values[size_t(g.inputs[i])];
      const Buffer& buf = g.buffers[size_t(in.buffer)];
      if (!buf.device.is_cuda() || buf.device.index != device_) return str_cat("input ", i, " is on ", buf.device);
      if (!is_contiguous(in)) return str_cat("input ", i, " is not contiguous");
      const size_t first = size_t(in.offset) * dtype_size(in.dtype), extent = value_extent_bytes(in);
      for (int v : exe_.values_of_buffer_[size_t(in.buffer)]) {
        const Value& other = g.values[size_t(v)];
        if (size_t(other.offset) * dtype_size(other.dtype) < first || value_extent_bytes(other) > extent) {
          return str_cat("input ", i, " is read through a view that reaches outside it");
        }
      }
      for (const Node& n : g.nodes) {
        for (size_t a = 0; a < n.args.size(); ++a) {
          if (n.written[a] && n.args[a] >= 0 && g.values[size_t(n.args[a])].buffer == in.buffer) {
            return str_cat("op '", n.op, "' writes input ", i);
          }
        }
      }
    }
    for (size_t j = 0; j < g.outputs.size(); ++j) {
      // The caller gets its own tensor back uncaptured; here it would be the input's fixed buffer.
      if (g.buffers[size_t(g.values[size_t(g.outputs[j])].buffer)].kind == BufferKind::input) {
        return str_cat("output ", j, " is an input");
      }
    }
    for (size_t b = 0; b < g.buffers.size(); ++b) {
      if (g.buffers[b].kind == BufferKind::output && g.buffers[b].device != Device::cuda(device_)) {
        return str_cat("an output is on ", g.buffers[b].device);
      }
    }
    // Fixed buffers for the inputs (the caller's are copied in) and the outputs (copied out).
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Value& in = g.values[size_t(g.inputs[i])];
      auto staging = std::make_shared<Storage>(value_extent_bytes(in), Device::cuda(device_));
      for (int v : exe_.values_of_buffer_[size_t(in.buffer)]) exe_.values_[size_t(v)] = exe_.make_value(v, staging, 0);
      inputs_.push_back({staging, size_t(in.offset) * dtype_size(in.dtype), size_t(shape_numel(in.sizes)) * dtype_size(in.dtype)});
    }
    for (size_t b = 0; b < g.buffers.size(); ++b) {
      if (g.buffers[b].kind != BufferKind::output) continue;
      auto fixed = std::make_shared<Storage>(g.buffers[b].nbytes, g.buffers[b].device);
      for (int v : exe_.values_of_buffer_[b]) exe_.values_[size_t(v)] = exe_.make_value(v, fixed, 0);
      outputs_.push_back({int(b), fixed});
    }
    slots_ = std::make_unique<SlotBuffer>(refreshed * kSlotBytesPerCall, Device::cuda(device_));
    pool_ = std::make_unique<cuda::PrivatePool>(device_);
    return "";
  }

  // Captures every run of calls between the calls that run outside; a call whose capture fails
  // runs outside from then on (said once per op). False when a failure names no call.
  bool capture_all(const std::vector<uint64_t>& u64) {
    const Graph& g = exe_.g_;
    const size_t n = g.nodes.size();
    std::set<std::string> named;
    size_t i = 0;
    while (i < n) {
      if (outside_[i]) {
        steps_.push_back({int(i), nullptr});
        ++summary_.outside_calls;
        ++i;
        continue;
      }
      size_t end = i;
      while (end < n && !outside_[end]) ++end;
      const size_t slots_before = slots_->cursor;
      int failed = -1;
      std::string why;
      std::unique_ptr<cuda::GraphExec> exec = capture_range(i, end, u64, failed, why);
      if (exec) {
        ++summary_.graphs;
        summary_.captured_calls += int(end - i);
        summary_.cuda_nodes += exec->nodes();
        steps_.push_back({-1, std::move(exec)});
        i = end;
        continue;
      }
      if (failed < 0) {
        std::fprintf(stderr, "trireme: graph: the replay is not captured as CUDA graphs: %s; its kernels are "
                     "called one by one\n", first_line(why).c_str());
        return false;
      }
      slots_->cursor = slots_before;
      outside_[size_t(failed)] = true;
      if (named.insert(g.nodes[size_t(failed)].op).second) {
        std::fprintf(stderr, "trireme: graph: op '%s' cannot be captured in a CUDA graph (%s); it runs between "
                     "the graphs\n", g.nodes[size_t(failed)].op.c_str(), first_line(why).c_str());
      }
    }
    for (size_t k = 0; k < n; ++k) {
      if (g.nodes[k].dynamic && !outside_[k]) refreshed_inside_.push_back(int(k));
    }
    return true;
  }

  std::vector<Tensor> replay(const std::vector<Tensor>& inputs, const std::vector<uint64_t>& u64) override {
    const Graph& g = exe_.g_;
    const cuda::Stream stream = cuda::current_stream(device_);
    cudaStream_t s = stream.handle();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputCopy& c = inputs_[i];
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(c.staging->data()) + c.offset, inputs[i].data_ptr(), c.bytes,
                                         cudaMemcpyDeviceToDevice, s));
    }
    if (!refreshed_inside_.empty()) {
      slots_->capturing = false;
      SlotsScope scope(slots_.get());
      for (int k : refreshed_inside_) {
        const Node& n = g.nodes[size_t(k)];
        refresh_host_args(n, u64);
        slots_->cursor = slot_at_[size_t(k)];
        n.invoke(n.host_args.get(), exe_.node_args_[size_t(k)].data());
      }
      // From pageable memory: staged before the call returns, so the next replay may rewrite it.
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(slots_->device_copy->data(), slots_->host.data(), slots_->used,
                                         cudaMemcpyHostToDevice, s));
    }
    for (const Step& step : steps_) {
      if (step.graph) {
        step.graph->launch(stream);
      } else {
        const Node& n = g.nodes[size_t(step.node)];
        refresh_host_args(n, u64);
        n.invoke(n.host_args.get(), exe_.node_args_[size_t(step.node)].data());
      }
    }
    std::vector<StoragePtr> fresh(g.buffers.size());
    for (const auto& [b, fixed] : outputs_) {
      fresh[size_t(b)] = std::make_shared<Storage>(fixed->nbytes(), fixed->device());
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(fresh[size_t(b)]->data(), fixed->data(), fixed->nbytes(),
                                         cudaMemcpyDeviceToDevice, s));
    }
    std::vector<Tensor> out;
    out.reserve(g.outputs.size());
    for (int v : g.outputs) {
      const int b = g.values[size_t(v)].buffer;
      out.push_back(fresh[size_t(b)] ? exe_.make_value(v, fresh[size_t(b)], 0) : exe_.values_[size_t(v)]);
    }
    return out;
  }

  CaptureSummary summary() const override {
    CaptureSummary s = summary_;
    s.pool_bytes = pool_->reserved_bytes();
    return s;
  }

 private:
  struct Step {
    int node = -1;                           // a call that runs outside the graphs
    std::unique_ptr<cuda::GraphExec> graph;  // or a graph
  };
  struct InputCopy {
    StoragePtr staging;
    size_t offset = 0, bytes = 0;  // where the caller's tensor goes in it
  };

  // Captures calls [begin, end) into one graph; null with `failed` (the call, or -1) and `why`.
  std::unique_ptr<cuda::GraphExec> capture_range(size_t begin, size_t end, const std::vector<uint64_t>& u64, int& failed,
                                                 std::string& why) {
    const Graph& g = exe_.g_;
    const cuda::Stream cs = cuda::capture_stream(device_);
    cuda::StreamGuard on(cs);
    cuda::PrivatePoolScope pool(*pool_);
    cuda::begin_capture(cs);
    size_t i = begin;
    try {
      for (; i < end; ++i) {
        const Node& n = g.nodes[i];
        Tensor* const* args = exe_.node_args_[i].data();
        if (n.dynamic) {
          refresh_host_args(n, u64);
          slot_at_[i] = slots_->cursor;
          const int before = slots_->placed;
          slots_->capturing = true;
          SlotsScope scope(slots_.get());
          n.invoke(n.host_args.get(), args);
          if (slots_->placed == before) {
            failed = int(i);
            why = "its host arguments change per replay and its kernel takes them by value";
            break;
          }
        } else {
          n.invoke(n.host_args.get(), args);
        }
        if (!cuda::capture_is_active(cs)) {
          failed = int(i);
          why = "it made a call that invalidated the capture";
          break;
        }
      }
    } catch (const std::exception& e) {
      failed = int(i);
      why = e.what();
    }
    std::string end_why;
    std::unique_ptr<cuda::GraphExec> exec = cuda::end_capture(cs, end_why);
    if (failed >= 0) return nullptr;
    if (!exec) why = end_why;
    return exec;
  }

  Executable& exe_;
  int device_;
  std::vector<bool> outside_;
  std::vector<size_t> slot_at_;        // per captured refreshed call: where its scalars start
  std::vector<int> refreshed_inside_;  // the refreshed calls inside the graphs
  std::vector<InputCopy> inputs_;
  std::vector<std::pair<int, StoragePtr>> outputs_;  // (output buffer, its fixed storage)
  std::unique_ptr<SlotBuffer> slots_;
  std::unique_ptr<cuda::PrivatePool> pool_;  // before steps_: released after the graphs that use it
  std::vector<Step> steps_;
  CaptureSummary summary_;
};

std::unique_ptr<CudaReplay> CudaReplay::capture(Executable& exe, const std::vector<uint64_t>& u64) {
  const Graph& g = exe.graph();
  int device = -1;
  for (const Node& n : g.nodes) {
    if (n.kernel != nullptr && n.device.is_cuda()) {
      device = n.device.index;
      break;
    }
  }
  if (device < 0) return nullptr;  // nothing to capture
  auto r = std::make_unique<CudaGraphReplay>(exe, device);
  std::string why = r->prepare();
  if (!why.empty()) {
    std::fprintf(stderr, "trireme: graph: the replay is not captured as CUDA graphs: %s; its kernels are called one "
                 "by one\n", why.c_str());
    return nullptr;
  }
  try {
    if (!r->capture_all(u64)) return nullptr;
  } catch (const std::exception& e) {  // e.g. no stream to capture on
    std::fprintf(stderr, "trireme: graph: the replay is not captured as CUDA graphs: %s; its kernels are called one "
                 "by one\n", first_line(e.what()).c_str());
    return nullptr;
  }
  return r;
}

#endif

}  // namespace trireme::graph
