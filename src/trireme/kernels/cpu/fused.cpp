// CPU fused elementwise kernel: a program (kernels/fused.h) runs over tiles of elements. Each
// thread takes whole tiles; for a tile it loads the inputs into acc-typed tile buffers, runs the
// steps one after another over the tile (each step a plain loop over the elementwise kernels' own
// per-element function, which the compiler vectorises), and stores the outputs. The tiles stay in
// cache, so a chain of k kernels reads its inputs and writes its outputs once instead of k times.
#include <algorithm>
#include <optional>
#include <vector>

#include "trireme/kernels/cpu/elementwise_ops.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/fused.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

constexpr int64_t kTile = 512;

template <class Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn.template operator()<double>();
    case DType::f32: return fn.template operator()<float>();
    case DType::bf16: return fn.template operator()<bf16_t>();
    case DType::f16: return fn.template operator()<f16_t>();
    default: break;
  }
  TRIREME_FAIL("fused elementwise: a slot of dtype ", dtype_name(t), "; fused programs hold floating-point values");
}

// Element offsets of a strided input over the program's shape, its dims coalesced.
struct StridedWalk {
  Shape sizes, strides;

  StridedWalk(const Shape& shape, const Shape& st) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 1) continue;
      if (!sizes.empty() && strides.back() == st[d] * shape[d]) {
        sizes.back() *= shape[d];
        strides.back() = st[d];
      } else {
        sizes.push_back(shape[d]);
        strides.push_back(st[d]);
      }
    }
  }

  // off[i] = the offset of element begin + i, for i < n.
  void offsets(int64_t begin, int64_t n, int64_t* off) const {
    const size_t nd = sizes.size();
    int64_t idx[16] = {};
    int64_t o = 0, r = begin;
    for (size_t d = nd; d-- > 0;) {
      idx[d] = r % sizes[d];
      r /= sizes[d];
      o += idx[d] * strides[d];
    }
    for (int64_t i = 0; i < n; ++i) {
      off[i] = o;
      for (size_t d = nd; d-- > 0;) {
        ++idx[d];
        o += strides[d];
        if (idx[d] < sizes[d]) break;
        o -= idx[d] * strides[d];
        idx[d] = 0;
      }
    }
  }
};

// The unfused kernels store T(f(...)) and the next one loads acc_t<T> of it: a tile holds that.
template <class T, class Op>
void unary_tile(const acc_t<T>* x, acc_t<T>* o, int64_t n, acc_t<T> alpha) {
  for (int64_t i = 0; i < n; ++i) o[i] = acc_t<T>(T(Op::f(x[i], alpha)));
}

template <class T, class Op>
void binary_tile(const acc_t<T>* a, const acc_t<T>* b, acc_t<T>* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = acc_t<T>(T(Op::f(a[i], b[i])));
}

template <class T>
void unary_step(PointwiseOp op, const acc_t<T>* x, acc_t<T>* o, int64_t n, acc_t<T> al) {
  switch (op) {
#define CASE(name, Op) \
  case PointwiseOp::name: return unary_tile<T, Op>(x, o, n, al);
    CASE(neg, NegOp) CASE(exp, ExpOp) CASE(log, LogOp) CASE(sqrt, SqrtOp) CASE(rsqrt, RsqrtOp) CASE(abs, AbsOp)
    CASE(tanh, TanhOp) CASE(sigmoid, SigmoidOp) CASE(relu, ReluOp) CASE(silu, SiluOp) CASE(gelu_erf, GeluErfOp)
    CASE(gelu_tanh, GeluTanhOp) CASE(add_scalar, AddScalarOp) CASE(mul_scalar, MulScalarOp)
    CASE(pow_scalar, PowScalarOp) CASE(rsub_scalar, RsubScalarOp) CASE(rdiv_scalar, RdivScalarOp)
#undef CASE
    default: TRIREME_FAIL("fused elementwise: ", pointwise_op_name(op), " is not a unary op");
  }
}

template <class T>
void binary_step(PointwiseOp op, const acc_t<T>* a, const acc_t<T>* b, acc_t<T>* o, int64_t n) {
  switch (op) {
#define CASE(name, Op) \
  case PointwiseOp::name: return binary_tile<T, Op>(a, b, o, n);
    CASE(add, AddOp) CASE(sub, SubOp) CASE(mul, MulOp) CASE(div, DivOp) CASE(pow, PowOp) CASE(maximum, MaximumOp)
    CASE(tanh_backward, TanhBackwardOp) CASE(sigmoid_backward, SigmoidBackwardOp)
    CASE(relu_backward, ReluBackwardOp) CASE(silu_backward, SiluBackwardOp)
    CASE(gelu_erf_backward, GeluErfBackwardOp) CASE(gelu_tanh_backward, GeluTanhBackwardOp)
#undef CASE
    default: TRIREME_FAIL("fused elementwise: ", pointwise_op_name(op), " is not a binary op");
  }
}

void fused_prepare_cpu(FusedProgram& program, Device device, std::string& error) {
  error.clear();
  for (int k = 0; k < int(program.outputs.size()); ++k) {
    if (program.outputs[size_t(k)] < 0) error = "an output without a slot";
  }
}

void fused_cpu(const FusedProgram& p, Tensor* const* tensors) {
  const int64_t n = shape_numel(p.sizes);
  if (n == 0) return;
  const size_t slots = p.slot_dtype.size();
  std::vector<std::optional<StridedWalk>> walks(size_t(p.inputs));
  for (int k = 0; k < p.inputs; ++k) {
    const Tensor& t = *tensors[k];
    if (!t.is_contiguous() || t.sizes() != p.sizes) walks[size_t(k)].emplace(p.sizes, t.strides());
  }
  const int64_t len = std::min(kTile, n);  // a tile's elements (a small program's one tile: n)
  const int64_t tiles = (n + len - 1) / len;
  parallel_for(tiles, len, [&](int64_t t0, int64_t t1) {
    // One tile per slot, each len acc values (doubles' room: f64 slots need it).
    std::vector<double> buffer(slots * size_t(len));
    std::vector<int64_t> off(static_cast<size_t>(len));
    auto tile = [&]<class A>(int slot) { return reinterpret_cast<A*>(buffer.data() + size_t(slot) * size_t(len)); };
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t begin = t * len, m = std::min(len, n - begin);
      for (int k = 0; k < p.inputs; ++k) {
        dispatch_float(p.slot_dtype[size_t(k)], [&]<class T>() {
          using A = acc_t<T>;
          const T* x = static_cast<const T*>(tensors[k]->data_ptr());
          A* o = tile.template operator()<A>(k);
          if (!walks[size_t(k)]) {
            for (int64_t i = 0; i < m; ++i) o[i] = A(x[begin + i]);
          } else {
            walks[size_t(k)]->offsets(begin, m, off.data());
            for (int64_t i = 0; i < m; ++i) o[i] = A(x[off[size_t(i)]]);
          }
        });
      }
      for (const FusedStep& s : p.steps) {
        const DType dt = p.slot_dtype[size_t(s.out)];
        if (s.op == PointwiseOp::copy) {
          dispatch_float(p.slot_dtype[size_t(s.in[0])], [&]<class Src>() {
            dispatch_float(dt, [&]<class Dst>() {
              const acc_t<Src>* x = tile.template operator()<acc_t<Src>>(s.in[0]);
              acc_t<Dst>* o = tile.template operator()<acc_t<Dst>>(s.out);
              for (int64_t i = 0; i < m; ++i) o[i] = acc_t<Dst>(Dst(x[i]));
            });
          });
          continue;
        }
        dispatch_float(dt, [&]<class T>() {
          using A = acc_t<T>;
          A* o = tile.template operator()<A>(s.out);
          if (is_unary(s.op)) {
            unary_step<T>(s.op, tile.template operator()<A>(s.in[0]), o, m, A(s.alpha));
          } else {
            binary_step<T>(s.op, tile.template operator()<A>(s.in[0]), tile.template operator()<A>(s.in[1]), o, m);
          }
        });
      }
      for (size_t k = 0; k < p.outputs.size(); ++k) {
        const int slot = p.outputs[k];
        dispatch_float(p.slot_dtype[size_t(slot)], [&]<class T>() {
          using A = acc_t<T>;
          T* o = static_cast<T*>(tensors[size_t(p.inputs) + k]->data_ptr());
          const A* x = tile.template operator()<A>(slot);
          for (int64_t i = 0; i < m; ++i) o[begin + i] = T(x[i]);
        });
      }
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_fused) {
  registry.add_each<FusedPrepareKernel, double, float, bf16_t, f16_t>(
      "fused_prepare", DeviceType::cpu, []<class T>() { return &fused_prepare_cpu; });
  registry.add_each<FusedElementwiseKernel, double, float, bf16_t, f16_t>(
      "fused_elementwise", DeviceType::cpu, []<class T>() { return &fused_cpu; });
}

}  // namespace trireme::cpu
