// Attention by cuDNN's runtime-fusion engine (see attention_cudnn.h). cuDNN recognises flash
// attention as a pattern of its backend graph operations: the forward is
//   S = Q Kᵀ · scale, [causal: S_ij = -inf where j > i], M = rowmax S, E = exp(S - M),
//   Z = rowsum E, lse = M + log Z, O = (E / Z) V,
// and the backward, from dO, O and lse,
//   δ = rowsum(dO ∘ O), P = exp(S - lse) [masked], dV = Pᵀ dO, dS = P ∘ (dO Vᵀ - δ) · scale,
//   dK = dSᵀ Q, dQ = dS K,
// and compiles one kernel for each graph. The graphs below are those; an execution plan is built
// once per shape, stride layout and dtype and kept for the life of the process. Every step of the
// plan's building can answer "not supported" (an old cuDNN, a head size it has no kernel for):
// then attention.cu's own kernels run instead, and the log says so once.
#include "trireme/kernels/cuda/attention_cudnn.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#ifdef TRIREME_WITH_CUDNN
#include <cudnn.h>

#include <array>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "trireme/cuda/device.h"
#include "trireme/cuda/graph_capture.h"
#include "trireme/kernels/varying_shapes.h"
#endif

namespace trireme::cuda_kernels {

#ifndef TRIREME_WITH_CUDNN

bool cudnn_attention_enabled() { return false; }
std::string describe_cudnn_attention() { return "not built: CUDA attention runs trireme's own kernels"; }
bool cudnn_attention_forward(const Tensor&, const Tensor&, const Tensor&, bool, Tensor&, Tensor&, cudaStream_t) {
  return false;
}
bool cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              bool, Tensor&, Tensor&, Tensor&, cudaStream_t) {
  return false;
}

#else

namespace {

// A cuDNN call that failed while a plan was being built: the plan is "not supported".
struct CudnnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw CudnnError(std::string(what) + ": " + cudnnGetErrorString(st) +
                   (detail[0] ? std::string(" (") + detail + ")" : ""));
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "create descriptor");
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  template <class V>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const V& value) {
    check(cudnnBackendSetAttribute(d_, name, type, 1, &value), "set attribute");
    return *this;
  }
  Desc& set_array(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* values) {
    check(cudnnBackendSetAttribute(d_, name, type, n, values), "set attribute");
    return *this;
  }
  Desc& finalize() {
    check(cudnnBackendFinalize(d_), "finalize");
    return *this;
  }
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::vector<int64_t>;

// The unique ids of the tensors a plan reads and writes (its variant pack), and their pointers by
// uid: the by-value scalars are host pointers.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kLse, kScale, kNegInf, kDO, kDQ, kDK, kDV, kRowDot, kOne, kUidEnd };
using Pointers = std::array<void*, kUidEnd>;

// Builds one operation graph: tensors and operations are kept alive until the plan is built.
class GraphBuilder {
 public:
  // A tensor in memory (uid), a by-value scalar, or (uid 0) a virtual intermediate.
  cudnnBackendDescriptor_t tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides, int64_t uid = 0,
                                  bool by_value = false) {
    const bool is_virtual = uid == 0;
    if (is_virtual) {
      uid = next_virtual_++;
    } else {
      uids_.push_back(uid);
    }
    Desc& t = keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
        .set_array(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data())
        .set_array(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, alignment)
        .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, is_virtual)
        .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, by_value)
        .finalize();
    return t.get();
  }
  // A by-value f32 scalar: one descriptor per uid however often the graph reads it.
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    auto& d = scalars_[uid];
    if (!d) d = tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, uid, true);
    return d;
  }
  // A virtual f32 tensor of the given shape, packed.
  cudnnBackendDescriptor_t temp(const Dims& dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(type, dims, packed(dims));
  }

  // y = mode(x[, b][, t]) elementwise, b and t broadcast.
  cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                                     cudnnDataType_t precision = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    Desc& pw = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, precision);
    if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
    pw.finalize();
    Desc& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, pw.get())
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
    if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b);
    if (t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, t);
    ops_.push_back(op.finalize().get());
    return y;
  }
  // y = reduction of x over the dims where y has size 1.
  cudnnBackendDescriptor_t reduce(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
    Desc& r = keep(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
        .finalize();
    Desc& op = keep(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, r.get())
        .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
    ops_.push_back(op.finalize().get());
    return y;
  }
  // c = a · b over the last two dims, batched over the first two; f32 accumulation.
  cudnnBackendDescriptor_t matmul(cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b) {
    Desc& m = keep(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).finalize();
    Desc& op = keep(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, a)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, c)
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, m.get());
    ops_.push_back(op.finalize().get());
    return c;
  }
  // y = x seen with y's dims and strides (a transpose, here).
  cudnnBackendDescriptor_t reshape(cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x) {
    Desc& op = keep(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x)
        .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
    ops_.push_back(op.finalize().get());
    return y;
  }

  // The causal mask: s where the key's index j ≤ the query's index i, else -inf (top-left aligned).
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t s, const Dims& dims) {
    auto row =
        pointwise(CUDNN_POINTWISE_GEN_INDEX, temp(dims, CUDNN_DATA_INT32), s, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);
    auto col =
        pointwise(CUDNN_POINTWISE_GEN_INDEX, temp(dims, CUDNN_DATA_INT32), s, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);
    auto keep_it =
        pointwise(CUDNN_POINTWISE_CMP_GE, temp(dims, CUDNN_DATA_BOOLEAN), row, col, nullptr, CUDNN_DATA_BOOLEAN);
    return pointwise(CUDNN_POINTWISE_BINARY_SELECT, temp(dims), s, scalar(kNegInf), keep_it);
  }

  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }
  const std::vector<int64_t>& uids() const { return uids_; }

  static Dims packed(const Dims& dims) {
    Dims s(dims.size(), 1);
    for (int i = int(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
    return s;
  }

 private:
  Desc& keep(cudnnBackendDescriptorType_t type) { return *kept_.emplace_back(std::make_unique<Desc>(type)); }

  std::vector<std::unique_ptr<Desc> > kept_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::vector<int64_t> uids_;  // of the tensors in memory and the scalars, in the order made
  std::unordered_map<int64_t, cudnnBackendDescriptor_t> scalars_;
  int64_t next_virtual_ = 100;
};

// A built plan: its execution plan, the bytes of workspace cuDNN asks for, and the tensors it reads and
// writes. The backward's row dots δ (f32) follow cuDNN's workspace in the same scratch block.
struct Plan {
  cudnnHandle_t handle = nullptr;  // its device's
  std::unique_ptr<Desc> plan;
  int64_t workspace = 0;
  std::vector<int64_t> uids;  // what its variant pack must hold: exactly the graph's tensors
};

cudnnDataType_t cudnn_type(DType t) { return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

Dims dims_of(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }
Dims strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }
// A (B, H, T, hd) operand seen as its transpose (B, H, hd, T), as cuDNN's graphs want K (and V in the backward).
Dims transposed(Dims d) {
  std::swap(d[2], d[3]);
  return d;
}

// The first of the heuristics' engine configurations that builds into a plan for this graph.
Plan build_plan(cudnnHandle_t handle, GraphBuilder& g) {
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set_array(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(g.ops().size()), g.ops().data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
      .finalize();
  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, graph.get())
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A)
      .finalize();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr),
        "heuristics count");
  if (count == 0) throw CudnnError("no engine for this graph");
  std::vector<std::unique_ptr<Desc> > configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &count, raw.data()),
        "heuristics results");
  std::string last_error = "no engine configuration";
  for (int64_t i = 0; i < count; ++i) {
    try {
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw[size_t(i)]).finalize();
      Plan p;
      check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                     nullptr, &p.workspace),
            "workspace size");
      p.handle = handle;
      p.plan = std::move(plan);
      p.uids = g.uids();
      return p;
    } catch (const CudnnError& e) {
      last_error = e.what();
    }
  }
  throw CudnnError(last_error);
}

Plan forward_plan(cudnnHandle_t handle, DType dtype, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, bool causal) {
  const cudnnDataType_t io = cudnn_type(dtype);
  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2);
  const Dims scores{b, h, tq, tk}, rows{b, h, tq, 1};
  GraphBuilder g;
  auto qd = g.tensor(io, dims_of(q), strides_of(q), kQ);
  auto kt = g.tensor(io, transposed(dims_of(k)), transposed(strides_of(k)), kK);
  auto vd = g.tensor(io, dims_of(v), strides_of(v), kV);
  auto od = g.tensor(io, dims_of(out), strides_of(out), kO);
  auto lse = g.tensor(CUDNN_DATA_FLOAT, rows, GraphBuilder::packed(rows), kLse);
  auto s = g.pointwise(CUDNN_POINTWISE_MUL, g.temp(scores), g.matmul(g.temp(scores), qd, kt), g.scalar(kScale));
  if (causal) s = g.causal_mask(s, scores);
  auto row_max = g.reduce(CUDNN_REDUCE_TENSOR_MAX, g.temp(rows), s);
  auto e =
      g.pointwise(CUDNN_POINTWISE_EXP, g.temp(scores), g.pointwise(CUDNN_POINTWISE_SUB, g.temp(scores), s, row_max));
  auto z = g.reduce(CUDNN_REDUCE_TENSOR_ADD, g.temp(rows), e);
  g.pointwise(CUDNN_POINTWISE_ADD, lse, row_max, g.pointwise(CUDNN_POINTWISE_LOG, g.temp(rows), z));
  auto p = g.pointwise(CUDNN_POINTWISE_DIV, g.temp(scores, io), e, z);
  g.matmul(od, p, vd);
  return build_plan(handle, g);
}

// The backward, from dO (grad), O and lse.
Plan backward_plan(cudnnHandle_t handle, DType dtype, const Tensor& grad, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& gq, const Tensor& gk, const Tensor& gv,
                   bool causal) {
  const cudnnDataType_t io = cudnn_type(dtype);
  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2), hd = q.size(3);
  const Dims scores{b, h, tq, tk}, rows{b, h, tq, 1}, scores_t{b, h, tk, tq};
  const Dims scores_t_strides{h * tq * tk, tq * tk, 1, tk};  // scores seen transposed
  GraphBuilder g;
  auto qd = g.tensor(io, dims_of(q), strides_of(q), kQ);
  auto kt = g.tensor(io, transposed(dims_of(k)), transposed(strides_of(k)), kK);
  auto vt = g.tensor(io, transposed(dims_of(v)), transposed(strides_of(v)), kV);
  auto od = g.tensor(io, dims_of(out), strides_of(out), kO);
  auto dod = g.tensor(io, dims_of(grad), strides_of(grad), kDO);
  auto lse = g.tensor(CUDNN_DATA_FLOAT, rows, GraphBuilder::packed(rows), kLse);
  auto dq = g.tensor(io, dims_of(gq), strides_of(gq), kDQ);
  auto dk = g.tensor(io, dims_of(gk), strides_of(gk), kDK);
  auto dv = g.tensor(io, dims_of(gv), strides_of(gv), kDV);
  auto row_dot = g.tensor(CUDNN_DATA_FLOAT, rows, GraphBuilder::packed(rows), kRowDot);
  const Dims qshape{b, h, tq, hd};  // dO ∘ O
  // δ = rowsum(dO ∘ O)
  auto dot = g.reduce(CUDNN_REDUCE_TENSOR_ADD, g.temp(rows), g.pointwise(CUDNN_POINTWISE_MUL, g.temp(qshape), dod, od));
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, dot, g.scalar(kOne));
  // P = exp(S · scale - lse), masked
  auto s = g.pointwise(CUDNN_POINTWISE_MUL, g.temp(scores), g.matmul(g.temp(scores), qd, kt), g.scalar(kScale));
  s = g.pointwise(CUDNN_POINTWISE_SUB, g.temp(scores), s, lse);
  if (causal) s = g.causal_mask(s, scores);
  auto p = g.pointwise(CUDNN_POINTWISE_EXP, g.temp(scores), s);
  // dV = Pᵀ dO
  g.matmul(dv, g.reshape(g.tensor(io, scores_t, scores_t_strides), p), dod);
  // dS = P ∘ (dO Vᵀ - δ) · scale
  auto dp = g.matmul(g.temp(scores), dod, vt);
  auto ds = g.pointwise(CUDNN_POINTWISE_MUL, g.temp(scores),
                        g.pointwise(CUDNN_POINTWISE_SUB, g.temp(scores), dp, row_dot), p);
  ds = g.pointwise(CUDNN_POINTWISE_MUL, g.temp(scores), ds, g.scalar(kScale));
  // dK = dSᵀ Q
  g.matmul(dk, g.reshape(g.tensor(io, scores_t, scores_t_strides), ds), qd);
  // dQ = dS K, written by the matmul itself: cuDNN's other form accumulates dQ in f32 with
  // atomics, 5 % faster but different bits on every run (GPT-2's shape, 2026-12-02: 0.760 against
  // 0.801 ms forward and backward), and a rerun must give the same gradients.
  g.matmul(dq, ds, g.reshape(g.tensor(CUDNN_DATA_FLOAT, dims_of(k), strides_of(k)), kt));
  return build_plan(handle, g);
}

// A plan's key: direction, causal, then each operand's dtype, device, sizes and strides.
using PlanKey = std::vector<int64_t>;

struct CudnnState {
  std::mutex mu;
  std::unordered_map<int, cudnnHandle_t> handles;
  std::map<PlanKey, std::shared_ptr<Plan> > plans;  // null: cuDNN cannot run this one
  bool said_unsupported = false;
};

CudnnState& state() {
  static CudnnState* s = new CudnnState();  // never destroyed: see the allocator's note on exit
  return *s;
}

enum Direction : int64_t { kForward, kBackward };

PlanKey key_of(Direction direction, bool causal, std::initializer_list<const Tensor*> ts) {
  PlanKey key{direction, causal};
  for (const Tensor* t : ts) {
    key.insert(key.end(), {int64_t(t->dtype()), t->device().index});
    for (int d = 0; d < t->dim(); ++d) key.insert(key.end(), {t->size(d), t->stride(d)});
  }
  return key;
}

// The key in words, for the log.
std::string describe(const PlanKey& key) {
  std::ostringstream text;
  text << (key[0] == kForward ? "forward" : "backward") << (key[1] ? " causal" : " full")
       << " (dtype, device, size:stride...):";
  for (size_t i = 2; i < key.size(); ++i) text << " " << key[i];
  return text.str();
}

// Whether cuDNN's kernels take these operands at all (16-bit, unit last strides, 16-byte rows) and
// the call is worth a plan (its shape will come again).
bool eligible(std::initializer_list<const Tensor*> ts) {
  if (kernels::shapes_vary()) return false;
  for (const Tensor* t : ts) {
    if (t->dtype() != DType::bf16 && t->dtype() != DType::f16) return false;
    if (t->stride(3) != 1 || reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (t->size(d) > 1 && t->stride(d) % 8 != 0) return false;
  }
  const int64_t hd = (*ts.begin())->size(3);
  return hd > 0 && hd % 8 == 0 && hd <= 256;
}

// The plan for `key`, built by `build` on first use; null when cuDNN cannot run it.
template <class Build>
std::shared_ptr<Plan> plan_for(CudnnState& st, const PlanKey& key, int device, Build build) {
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return it->second;
  std::shared_ptr<Plan> plan;
  try {
    cuda::RelaxedCaptureScope relaxed;  // building compiles kernels; a capture in progress must not see it
    cudnnHandle_t& handle = st.handles[device];
    if (!handle) check(cudnnCreate(&handle), "cudnnCreate");
    plan = std::make_shared<Plan>(build(handle));
  } catch (const CudnnError& e) {
    if (!st.said_unsupported) {
      std::cerr << "trireme: cuDNN attention cannot run " << describe(key) << " (" << e.what()
                << "); trireme's own attention kernels run instead\n";
      st.said_unsupported = true;
    }
  }
  st.plans.emplace(key, plan);
  return plan;
}

// Runs the plan on `stream`: `pointers` holds every tensor a plan of its direction may read or
// write (a graph may lack some: the causal mask's -inf); the scalars are set here.
void execute(const Plan& plan, cudaStream_t stream, int64_t head_dim, Pointers pointers, void* workspace) {
  float scale = float(1.0 / std::sqrt(double(head_dim))), neg_inf = -std::numeric_limits<float>::infinity(), one = 1;
  pointers[kScale] = &scale;
  pointers[kNegInf] = &neg_inf;
  pointers[kOne] = &one;
  std::vector<void*> used;
  for (int64_t uid : plan.uids) used.push_back(pointers[size_t(uid)]);
  check(cudnnSetStream(plan.handle, stream), "cudnnSetStream");
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set_array(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(plan.uids.size()), plan.uids.data())
      .set_array(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(used.size()), used.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace)
      .finalize();
  check(cudnnBackendExecute(plan.handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
}

// Scratch of `bytes` on q's device for the duration of one call (the caching allocator keeps it
// stream-ordered, as for any kernel's temporary).
Tensor scratch(int64_t bytes, const Tensor& like) {
  return Tensor::empty({std::max<int64_t>(1, (bytes + 3) / 4)}, DType::f32, like.device());
}

// Why cuDNN attention is off in this process; empty when it is on.
const std::string& off_reason() {
  static const std::string reason = []() -> std::string {
    const char* env = std::getenv("TRIREME_CUDNN_ATTENTION");
    if (env && std::strcmp(env, "0") == 0) return "TRIREME_CUDNN_ATTENTION=0";
    if (cudnnGetVersion() < 90000) return "cuDNN older than 9";
    return "";
  }();
  return reason;
}

// The pointers both directions pass: q, k, v, out and lse.
Pointers forward_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse) {
  Pointers p{};
  p[kQ] = q.data_ptr(), p[kK] = k.data_ptr(), p[kV] = v.data_ptr(), p[kO] = out.data_ptr(), p[kLse] = lse.data_ptr();
  return p;
}

}  // namespace

bool cudnn_attention_enabled() { return off_reason().empty(); }

std::string describe_cudnn_attention() {
  auto version = [](size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  };
  const std::string s = "built with cuDNN " + version(CUDNN_VERSION) + ", running " + version(cudnnGetVersion());
  return s + (off_reason().empty() ? "; attention in bf16/f16: cuDNN"
                                   : "; attention: trireme's own kernels (" + off_reason() + ")");
}

bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, Tensor& out, Tensor& lse,
                             cudaStream_t stream) {
  if (!cudnn_attention_enabled() || !eligible({&q, &k, &v, &out}) || !lse.is_contiguous()) return false;
  CudnnState& st = state();
  std::lock_guard lock(st.mu);
  auto plan = plan_for(st, key_of(kForward, causal, {&q, &k, &v, &out}), q.device().index,
                       [&](cudnnHandle_t h) { return forward_plan(h, q.dtype(), q, k, v, out, causal); });
  if (!plan) return false;
  Tensor ws = scratch(plan->workspace, q);
  execute(*plan, stream, q.size(3), forward_operands(q, k, v, out, lse), ws.data_ptr());
  return true;
}

bool cudnn_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, bool causal, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v,
                              cudaStream_t stream) {
  if (!cudnn_attention_enabled() || !eligible({&q, &k, &v, &out, &grad, &grad_q, &grad_k, &grad_v}) ||
      !lse.is_contiguous())
    return false;
  CudnnState& st = state();
  std::lock_guard lock(st.mu);
  auto plan = plan_for(
      st, key_of(kBackward, causal, {&grad, &q, &k, &v, &out, &grad_q, &grad_k, &grad_v}), q.device().index,
      [&](cudnnHandle_t h) { return backward_plan(h, q.dtype(), grad, q, k, v, out, grad_q, grad_k, grad_v, causal); });
  if (!plan) return false;
  const int64_t own = (plan->workspace + 255) / 256 * 256, rows = q.size(0) * q.size(1) * q.size(2);
  Tensor ws = scratch(own + rows * 4, q);  // cuDNN's workspace, then the row dots δ
  char* base = static_cast<char*>(ws.data_ptr());
  Pointers p = forward_operands(q, k, v, out, lse);
  p[kDO] = grad.data_ptr(), p[kDQ] = grad_q.data_ptr(), p[kDK] = grad_k.data_ptr(), p[kDV] = grad_v.data_ptr();
  p[kRowDot] = base + own;
  execute(*plan, stream, q.size(3), p, base);
  return true;
}

#endif  // TRIREME_WITH_CUDNN

}  // namespace trireme::cuda_kernels
