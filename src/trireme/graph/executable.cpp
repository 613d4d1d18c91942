// Replay of a planned graph.
#include "trireme/graph/executable.h"

#include "trireme/core/storage.h"
#include "trireme/graph/cuda_replay.h"
#include "trireme/kernels/kernel_tape.h"

namespace trireme::graph {

InputSpec input_spec(const Tensor& t) { return {t.sizes(), t.strides(), t.dtype(), t.device()}; }

std::string describe(const InputSpec& s) {
  return str_cat(dtype_name(s.dtype), " ", s.sizes, " strides ", s.strides, " on ", s.device);
}

const char* buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::input: return "input";
    case BufferKind::captured: return "captured";
    case BufferKind::constant: return "constant";
    case BufferKind::output: return "output";
    case BufferKind::intermediate: return "intermediate";
  }
  return "?";
}

bool same_view(const Value& a, const Value& b) {
  return a.buffer == b.buffer && a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset &&
         a.dtype == b.dtype;
}

bool is_contiguous(const Value& v) { return v.strides == contiguous_strides(v.sizes); }

bool rewritable(const Node& n) { return !n.pinned && !n.dynamic && n.refresh.empty() && n.u64_bindings.empty(); }

size_t value_extent_bytes(const Value& v) {
  int64_t last = v.offset;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] == 0) return 0;
    last += (v.sizes[d] - 1) * v.strides[d];
  }
  return size_t(last + 1) * dtype_size(v.dtype);
}

Executable::Executable(Graph g, ReplayOptions options)
    : g_(std::move(g)), plan_(plan_memory(g_)), options_(options) {
  for (int v : g_.inputs) {
    const Value& val = g_.values[size_t(v)];
    specs_.push_back({val.sizes, val.strides, val.dtype, g_.buffers[size_t(val.buffer)].device});
    traced_input_offsets_.push_back(val.offset);
  }
  Device arena_device;
  bool any = false;
  for (size_t b = 0; b < g_.buffers.size(); ++b) {
    if (plan_.offset[b] < 0) continue;
    TRIREME_CHECK(!any || g_.buffers[b].device == arena_device, "graph: the step's intermediates are on ",
                  arena_device, " and ", g_.buffers[b].device, "; one arena per device is not supported yet");
    arena_device = g_.buffers[b].device;
    any = true;
  }
  if (any) arena_ = std::make_shared<Storage>(plan_.arena_bytes, arena_device);
  std::vector<StoragePtr> storage(g_.buffers.size());
  for (size_t b = 0; b < g_.buffers.size(); ++b) {
    const Buffer& buf = g_.buffers[b];
    if (plan_.offset[b] >= 0) {
      storage[b] = std::make_shared<Storage>(Storage::Borrowed{}, static_cast<char*>(arena_->data()) + plan_.offset[b],
                                             buf.nbytes, buf.device);
    } else if (buf.storage) {
      storage[b] = buf.storage;
    }
  }
  values_of_buffer_.resize(g_.buffers.size());
  values_.resize(g_.values.size());
  for (size_t v = 0; v < g_.values.size(); ++v) {
    const int b = g_.values[v].buffer;
    values_of_buffer_[size_t(b)].push_back(int(v));
    if (storage[size_t(b)]) values_[v] = make_value(int(v), storage[size_t(b)], 0);
  }
  for (const Node& n : g_.nodes) {
    std::vector<Tensor*> args;
    for (int v : n.args) args.push_back(v < 0 ? &undefined_ : &values_[size_t(v)]);
    node_args_.push_back(std::move(args));
  }
}

Executable::~Executable() = default;

CaptureSummary Executable::capture_summary() const { return cuda_ ? cuda_->summary() : CaptureSummary{}; }

Tensor Executable::make_value(int v, const StoragePtr& storage, int64_t offset_shift) const {
  const Value& val = g_.values[size_t(v)];
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->sizes = val.sizes;
  impl->strides = val.strides;
  impl->offset = val.offset + offset_shift;
  impl->numel = shape_numel(val.sizes);
  impl->dtype = val.dtype;
  return Tensor(std::move(impl));
}

bool Executable::matches(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != specs_.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !(input_spec(inputs[i]) == specs_[i])) return false;
  }
  return true;
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& inputs) {
  // A replay calls its kernels directly, so a trace around it would not see them.
  TRIREME_CHECK(active_kernel_tape() == nullptr, "graph: a graph cannot be replayed inside a trace; call the "
                "traced function itself there");
  TRIREME_CHECK(inputs.size() == specs_.size(), "graph: replay with ", inputs.size(), " inputs, traced with ",
                specs_.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    TRIREME_CHECK(inputs[i].defined() && input_spec(inputs[i]) == specs_[i], "graph: input ", i, " is ",
                  inputs[i].defined() ? describe(input_spec(inputs[i])) : "undefined", ", traced as ",
                  describe(specs_[i]));
  }
  for (const auto& step : g_.host_steps) step();
  std::vector<uint64_t> u64(g_.u64_sources.size());
  for (size_t i = 0; i < u64.size(); ++i) u64[i] = g_.u64_sources[i]();
  if (!capture_tried_) {
    capture_tried_ = true;
    if (options_.cuda_graph) cuda_ = CudaReplay::capture(*this, u64);
  }
  if (cuda_) return cuda_->replay(inputs, u64);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int b = g_.values[size_t(g_.inputs[i])].buffer;
    const int64_t shift = inputs[i].offset() - traced_input_offsets_[i];
    for (int v : values_of_buffer_[size_t(b)]) values_[size_t(v)] = make_value(v, inputs[i].storage(), shift);
  }
  for (size_t b = 0; b < g_.buffers.size(); ++b) {
    if (g_.buffers[b].kind != BufferKind::output) continue;
    auto fresh = std::make_shared<Storage>(g_.buffers[b].nbytes, g_.buffers[b].device);
    for (int v : values_of_buffer_[b]) values_[size_t(v)] = make_value(v, fresh, 0);
  }
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const Node& n = g_.nodes[i];
    for (const auto& r : n.refresh) r(n.host_args.get());
    for (const auto& [arg, source] : n.u64_bindings) *arg = u64[size_t(source)];
    n.invoke(n.host_args.get(), node_args_[i].data());
  }
  std::vector<Tensor> out;
  out.reserve(g_.outputs.size());
  for (int v : g_.outputs) out.push_back(values_[size_t(v)]);
  return out;
}

}  // namespace trireme::graph
