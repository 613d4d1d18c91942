// The pass that folds GELU and its gradient into the GEMMs beside them (gemm_folds.h).
#include "trireme/graph/gemm_folds.h"

#include <typeindex>

#include "trireme/graph/call_touches.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/linalg.h"
#include "trireme/kernels/registry.h"

namespace trireme::graph {
namespace {

bool is_call(const Node& n, const char* op, std::type_index kernel) {
  return n.op == op && n.kernel_type == kernel && rewritable(n);
}

// matmul(a, b, bias, out) with a, b and out 2-D and out contiguous.
bool is_plain_product(const Graph& g, const Node& n) {
  if (!is_call(n, "matmul", typeid(MatmulKernel)) || n.args.size() != 4) return false;
  for (size_t a : {0, 1, 3}) {
    if (n.args[a] < 0 || g.values[size_t(n.args[a])].sizes.size() != 2) return false;
  }
  return is_contiguous(g.values[size_t(n.args[3])]);
}

// Whether v is contiguous and has as many elements as `like`, of its dtype, whatever its shape:
// what a fused call can read or write in like's shape.
bool fits_as(const Value& v, const Value& like) {
  return v.dtype == like.dtype && shape_numel(v.sizes) == shape_numel(like.sizes) && is_contiguous(v);
}

// Whether v holds exactly the elements of `like` (contiguous both), whatever its shape.
bool same_elements(const Value& v, const Value& like) {
  return v.buffer == like.buffer && v.offset == like.offset && fits_as(v, like) && is_contiguous(like);
}

// A contiguous value of `like`'s shape, and of v's contiguous elements, added to g: how the fused
// kernel sees a value that the call it replaces saw in another shape ((B, T, C) for (B·T, C)).
int as_shape_of(Graph& g, const Value& v, const Value& like) {
  Value r = v;
  r.sizes = like.sizes;
  r.strides = contiguous_strides(like.sizes);
  g.values.push_back(r);
  return int(g.values.size()) - 1;
}

template <class Fn>
struct FusedKernel {
  Fn fn;
};

// The call of a fused kernel in place of `product`, with the given tensor arguments.
template <class Fn>
Node fused_call(const Node& product, const char* op, std::vector<int> args, std::vector<bool> written,
                std::vector<uint64_t> read_versions) {
  Node n;
  n.op = op;
  n.device = product.device;
  n.dtype = product.dtype;
  n.kernel_type = std::type_index(typeid(Fn));
  const Fn fn = kernel_registry().find<Fn>(op, product.device.type, product.dtype);
  n.kernel = reinterpret_cast<void (*)()>(fn);
  n.args = std::move(args);
  n.written = std::move(written);
  n.read_versions = std::move(read_versions);
  n.attrs_comparable = false;
  n.recomputed = product.recomputed;
  n.host_args = std::make_shared<FusedKernel<Fn>>(FusedKernel<Fn>{fn});
  if constexpr (std::is_same_v<Fn, MatmulGeluKernel>) {
    n.invoke = [](void* a, Tensor* const* t) { static_cast<FusedKernel<Fn>*>(a)->fn(*t[0], *t[1], *t[2], *t[3], *t[4]); };
  } else {
    n.invoke = [](void* a, Tensor* const* t) { static_cast<FusedKernel<Fn>*>(a)->fn(*t[0], *t[1], *t[2], *t[3]); };
  }
  return n;
}

}  // namespace

Graph fold_gelu_into_gemms(const Graph& g) {
  const CallTouches touches(g);
  Graph out = g;  // gains the values the fused calls see in the product's shape
  std::vector<Node> nodes = g.nodes;
  std::vector<bool> dropped(nodes.size(), false);
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    const Node& m = g.nodes[size_t(i)];
    if (!is_plain_product(g, m)) continue;  // a dropped call is a GELU, never a product
    const int product = m.args[3];
    const Value& prod = touches.value(product);
    const DeviceType device = m.device.type;
    // Forward: matmul -> pre -> gelu_tanh -> y.
    if (const int k = touches.next_reader_of_own_write(product, i);
        k >= 0 && kernel_registry().has("matmul_gelu", device, m.dtype)) {
      const Node& gelu = g.nodes[size_t(k)];
      if (is_call(gelu, "gelu_tanh", typeid(UnaryKernel)) && gelu.args.size() == 2 && gelu.args[0] >= 0 &&
          gelu.args[1] >= 0 && gelu.dtype == m.dtype && same_elements(touches.value(gelu.args[0]), prod)) {
        const Value& y = touches.value(gelu.args[1]);
        if (y.buffer != prod.buffer && fits_as(y, prod) && !touches.touched_between(gelu.args[1], i, k, false)) {
          const int y2 = as_shape_of(out, y, prod);
          nodes[size_t(i)] = fused_call<MatmulGeluKernel>(
              m, "matmul_gelu", {m.args[0], m.args[1], m.args[2], y2, product}, {false, false, false, true, true},
              {m.read_versions[0], m.read_versions[1], m.read_versions[2], gelu.read_versions[1], m.read_versions[3]});
          dropped[size_t(k)] = true;
          continue;
        }
      }
    }
    // Backward: matmul -> grad -> gelu_tanh_backward(grad, pre) -> out.
    const int k = touches.only_other_toucher(product, i);
    if (k < 0 || m.args[2] >= 0 || !kernel_registry().has("matmul_gelu_backward", device, m.dtype)) continue;
    const Node& back = g.nodes[size_t(k)];
    if (!is_call(back, "gelu_tanh_backward", typeid(BinaryKernel)) || back.args.size() != 3 || back.args[0] < 0 ||
        back.args[1] < 0 || back.args[2] < 0 || back.dtype != m.dtype || !same_elements(touches.value(back.args[0]), prod))
      continue;
    const Value &pre = touches.value(back.args[1]), &grad_in = touches.value(back.args[2]);
    if (!fits_as(pre, prod) || !fits_as(grad_in, prod) || pre.buffer == grad_in.buffer || pre.buffer == prod.buffer || grad_in.buffer == prod.buffer ||
        touches.touched_between(back.args[1], i, k, true) || touches.touched_between(back.args[2], i, k, false))
      continue;
    const int pre2 = as_shape_of(out, pre, prod), grad_in2 = as_shape_of(out, grad_in, prod);
    nodes[size_t(i)] = fused_call<MatmulGeluBackwardKernel>(
        m, "matmul_gelu_backward", {m.args[0], m.args[1], pre2, grad_in2}, {false, false, false, true},
        {m.read_versions[0], m.read_versions[1], back.read_versions[1], back.read_versions[2]});
    dropped[size_t(k)] = true;
  }
  return without_dropped(out, std::move(nodes), dropped);
}

}  // namespace trireme::graph
