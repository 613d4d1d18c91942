// Graph: one traced step as a flat list of kernel calls (a kernel tape), the tensors they touch,
// and what the caller binds (inputs) and gets back (outputs). See docs/STATIC_GRAPH.md.
//
//   graph::Graph g = graph::trace(step, {x, y}).graph;      // runs step once, eagerly, recording
//   g = graph::eliminate_common_subexpressions(graph::eliminate_dead_code(g));
//   graph::Executable exe(g);                              // memory planned: one arena
//   std::vector<Tensor> out = exe.run({x2, y2});           // the same kernels, in order
//
// A buffer is one storage the step touched; a value is a view of a buffer (shape, strides,
// offset, dtype). Buffers are bound by identity: inputs (replaced by the caller's tensors at each
// replay), captured (storages that existed before the trace and that the step reads or updates
// in place: parameters, gradients, optimizer state; kept by the graph), constants (allocated and
// filled by host code during the trace, never written by a kernel), outputs (returned by the
// step; fresh storage at each replay) and intermediates (everything else: placed in one arena by
// the memory plan). A tensor allocated during the trace that outlives it is an error (trace.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme::graph {

enum class BufferKind { input, captured, constant, output, intermediate };
const char* buffer_kind_name(BufferKind k);

struct Buffer {
  BufferKind kind = BufferKind::intermediate;
  size_t nbytes = 0;
  Device device;
  StoragePtr storage;  // captured, constant: the storage itself
  int input = -1;      // input: which input binds it
};

struct Value {
  int buffer = -1;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // elements, into the buffer as traced
  DType dtype = DType::f32;
};

struct Node {
  std::string op;
  Device device;
  DType dtype = DType::f32;
  std::type_index kernel_type = std::type_index(typeid(void));
  void (*kernel)() = nullptr;
  std::vector<int> args;       // value ids, in the kernel's order of tensor arguments
  std::vector<bool> written;   // per tensor argument: an output of the kernel
  std::vector<uint64_t> read_versions;  // per tensor argument: how many writes its buffer had before
  std::string attrs;           // host arguments' bytes (CSE compares them)
  bool attrs_comparable = true;
  bool dynamic = false;        // host arguments recomputed before each replay (never merged by CSE)
  // Kept in its place relative to every other call by the passes that reorder: a transfer's post
  // or wait (dist::record_transfer), which the other ranks meet in this order.
  bool pinned = false;
  // Recorded in a checkpointed region's replay (autograd/checkpoint.h): it computes again what an
  // earlier call computed, so that the earlier result need not be kept. Common-subexpression
  // elimination never merges it into that call, which would keep the result after all.
  bool recomputed = false;
  // The traced kernel calls this node does the work of: more than one for a multi-tensor call that
  // merged them (multi_tensor.h); a replay reserves room for the scalars of each.
  int calls = 1;
  std::shared_ptr<void> host_args;
  std::function<void(void* args, Tensor* const* tensors)> invoke;
  std::vector<std::function<void(void*)>> refresh;             // before each replay
  std::vector<std::pair<uint64_t*, int>> u64_bindings;         // (argument, binding) before each replay
};

struct Graph {
  std::vector<Buffer> buffers;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;    // value id of each input (the tensor the caller passed)
  std::vector<int> outputs;   // value id of each output
  std::vector<std::function<void()>> host_steps;        // on_replay, in the order the trace met them
  std::vector<std::function<uint64_t()>> u64_sources;   // bind_u64 sources
  size_t eager_peak_bytes = 0;  // the traced (eager) run's peak of storages allocated inside the step
};

// The input signature a graph is valid for (its guard).
struct InputSpec {
  Shape sizes;
  Shape strides;
  DType dtype = DType::f32;
  Device device;
  bool operator==(const InputSpec&) const = default;
};
InputSpec input_spec(const Tensor& t);
std::string describe(const InputSpec& s);

// The value's size in bytes when it starts at its offset: what its buffer must hold at least.
size_t value_extent_bytes(const Value& v);
// Whether two values are one view: the same buffer, shape, strides, offset and dtype.
bool same_view(const Value& a, const Value& b);
bool is_contiguous(const Value& v);
// Whether a pass may remove, merge or move the call: it is not pinned and none of its host
// arguments is recomputed per replay.
bool rewritable(const Node& n);

}  // namespace trireme::graph
