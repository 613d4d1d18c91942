// The fused CUDA attention kernels against the CPU ones on the same inputs: output, log-sum-exp
// and the three gradients, for bf16/f16 (tensor-core path when hd is a multiple of 16 up to 128,
// the simple path otherwise) and f32 (simple path); lengths that fill no tile, one tile, a tile
// and one row, and many tiles; causal and not; Tq != Tk; strided head views of a fused QKV
// tensor; and bit-identical backward reruns (no atomics).
#include <gtest/gtest.h>

#include <string>

#include "cuda_op_check.h"
#include "trireme/cuda/stream.h"
#include "trireme/kernels/cuda/attention_cudnn.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/kernels/varying_shapes.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

namespace trireme {
namespace {

using testing::check_cuda_op;
using testing::expect_close;
using testing::tolerance_for;

// A (B, H, T, hd) tensor laid out as (B, T, H, hd), the layout ops/attention.cpp allocates.
Tensor empty_bthd(int64_t b, int64_t h, int64_t t, int64_t hd, DType dtype, Device device) {
  Tensor buf = Tensor::empty({b, t, h, hd}, dtype, device);
  return buf.alias({b, h, t, hd}, {t * h * hd, hd, h * hd, 1}, buf.offset());
}

struct Case {
  DType dtype;
  int64_t b, h, tq, tk, hd;
  bool causal;
  bool fused;  // q, k, v as head views of one (B, T, 3·H·hd) tensor (needs tq == tk)
};

std::string name_of(const Case& c) {
  return std::string(dtype_name(c.dtype)) + " B" + std::to_string(c.b) + " H" + std::to_string(c.h) + " Tq" +
         std::to_string(c.tq) + " Tk" + std::to_string(c.tk) + " hd" + std::to_string(c.hd) +
         (c.causal ? " causal" : " full") + (c.fused ? " fused" : "");
}

// q, k, v on `device` from the same random values on both devices.
std::vector<Tensor> make_qkv(const Case& c, Device device) {
  Generator gen(123);
  auto dev = [&](const Tensor& t) { return to_device(to_dtype(t, c.dtype), device); };
  if (c.fused) {
    Tensor x = dev(randn({c.b, c.tq, 3 * c.h * c.hd}, gen, DType::f64));
    auto head = [&](int64_t w) {
      return transpose(reshape(narrow(x, 2, w * c.h * c.hd, c.h * c.hd), {c.b, c.tq, c.h, c.hd}), 1, 2);
    };
    return {head(0), head(1), head(2)};
  }
  return {dev(randn({c.b, c.h, c.tq, c.hd}, gen, DType::f64)), dev(randn({c.b, c.h, c.tk, c.hd}, gen, DType::f64)),
          dev(randn({c.b, c.h, c.tk, c.hd}, gen, DType::f64))};
}

struct Result {
  Tensor out, lse, dq, dk, dv;
};

Result run(const Case& c, Device device, const Tensor& grad_f64) {
  std::vector<Tensor> x = make_qkv(c, device);
  Result r;
  r.out = empty_bthd(c.b, c.h, c.tq, c.hd, c.dtype, device);
  r.lse = Tensor::empty({c.b, c.h, c.tq}, stat_dtype(c.dtype), device);
  find_kernel<AttentionKernel>("scaled_dot_product_attention", device, c.dtype)(x[0], x[1], x[2], c.causal, r.out,
                                                                                r.lse);
  Tensor g = to_device(to_dtype(grad_f64, c.dtype), device);
  r.dq = empty_bthd(c.b, c.h, c.tq, c.hd, c.dtype, device);
  r.dk = empty_bthd(c.b, c.h, c.tk, c.hd, c.dtype, device);
  r.dv = empty_bthd(c.b, c.h, c.tk, c.hd, c.dtype, device);
  find_kernel<AttentionBackwardKernel>("scaled_dot_product_attention_backward", device, c.dtype)(
      g, x[0], x[1], x[2], r.out, r.lse, c.causal, r.dq, r.dk, r.dv);
  return r;
}

void check_case(const Case& c) {
  const std::string what = name_of(c);
  SCOPED_TRACE(what);
  Generator gen(77);
  Tensor grad = randn({c.b, c.h, c.tq, c.hd}, gen, DType::f64);
  Result cpu = run(c, Device::cpu(), grad), gpu = run(c, Device::cuda(0), grad);
  const double tol = tolerance_for(c.dtype);
  expect_close(gpu.out, cpu.out, tol, what + " out");
  expect_close(gpu.lse, cpu.lse, tol, what + " lse");
  expect_close(gpu.dq, cpu.dq, 4 * tol, what + " grad q");
  expect_close(gpu.dk, cpu.dk, 4 * tol, what + " grad k");
  expect_close(gpu.dv, cpu.dv, 4 * tol, what + " grad v");
  // Deterministic: a second run gives the same bits.
  Result again = run(c, Device::cuda(0), grad);
  for (auto [a, b, n] : {std::tuple{&again.dq, &gpu.dq, "dq"},
                         {&again.dk, &gpu.dk, "dk"},
                         {&again.dv, &gpu.dv, "dv"},
                         {&again.out, &gpu.out, "out"}}) {
    expect_close(*a, to_device(*b, Device::cpu()), 0.0, what + " rerun " + n);
  }
}

// Every case runs twice where the build has cuDNN: by cuDNN's fused attention (16-bit), then by
// trireme's own kernels (a VaryingShapes scope keeps plan-building kernels out).
template <class Cases>
void check_both_ways(Cases cases) {
  cases();
  if (cuda_kernels::cudnn_attention_enabled()) {
    SCOPED_TRACE("trireme's own kernels");
    kernels::VaryingShapes without_cudnn;
    cases();
  }
}

// The cuDNN pass above is cuDNN's: it takes 16-bit operands, and no f32 ones, nor any call in a
// VaryingShapes scope.
TEST(CudaAttention, CudnnTakesSixteenBitCallsWhereBuiltIn) {
  TRIREME_REQUIRE_GPU();
  if (!cuda_kernels::cudnn_attention_enabled()) GTEST_SKIP() << "no cuDNN in this build, or TRIREME_CUDNN_ATTENTION=0";
  const Device gpu = Device::cuda(0);
  for (DType dt : {DType::bf16, DType::f32}) {
    const Case c{dt, 2, 3, 64, 64, 64, true, false};
    std::vector<Tensor> x = make_qkv(c, gpu);
    Tensor out = empty_bthd(c.b, c.h, c.tq, c.hd, dt, gpu), lse = Tensor::empty({c.b, c.h, c.tq}, stat_dtype(dt), gpu);
    auto forward = [&] {
      return cuda_kernels::cudnn_attention_forward(x[0], x[1], x[2], true, out, lse, cuda::current_stream(0).handle());
    };
    EXPECT_EQ(forward(), dt == DType::bf16) << dt;
    kernels::VaryingShapes varying;
    EXPECT_FALSE(forward()) << dt;
  }
}

TEST(CudaAttention, KernelsAgainstCpu) {
  TRIREME_REQUIRE_GPU();
  check_both_ways([] {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      for (int64_t t : {1, 7, 64, 65, 130, 1024}) {
        for (int64_t hd : {16, 64, 128}) {
          for (bool causal : {true, false}) {
            const int64_t b = t >= 1024 ? 1 : 2, h = t >= 1024 ? 2 : 3;
            check_case({dt, b, h, t, t, hd, causal, false});
          }
        }
      }
    }
  });
}

TEST(CudaAttention, CrossLengthsOddHeadDimsAndViews) {
  TRIREME_REQUIRE_GPU();
  check_both_ways([] {
    for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
      check_case({dt, 2, 2, 65, 130, 64, false, false});  // more keys, ragged tiles
      check_case({dt, 2, 2, 130, 7, 64, false, false});   // more queries than one key tile
      check_case({dt, 1, 3, 1, 200, 32, false, false});   // one query
      check_case({dt, 2, 3, 70, 70, 24, true, false});    // hd 24: the simple path for every dtype
      check_case({dt, 2, 2, 33, 33, 40, false, false});   // hd 40: not a multiple of 16
      check_case({dt, 2, 3, 130, 130, 64, true, true});   // head views of a fused QKV projection
      check_case({dt, 1, 2, 67, 67, 16, false, true});
      // Lengths straddling the 128-row query blocks, the 128-key blocks of the dK, dV kernel and the
      // 32- and 64-key inner tiles, causal with Tq != Tk (the mask is j > i, top-left aligned).
      check_case({dt, 1, 2, 129, 129, 64, true, false});
      check_case({dt, 1, 2, 257, 257, 128, true, false});
      check_case({dt, 1, 2, 200, 200, 32, true, false});
      check_case({dt, 1, 2, 200, 129, 64, true, false});
      check_case({dt, 1, 2, 129, 300, 128, true, false});
      check_case({dt, 1, 2, 97, 161, 64, false, false});
    }
  });
}

TEST(CudaAttention, ThroughAutograd) {
  TRIREME_REQUIRE_GPU();
  using V = std::vector<Tensor>;
  check_cuda_op({"sdpa_t65_hd64_causal", {{1, 2, 65, 64}, {1, 2, 65, 64}, {1, 2, 65, 64}}, [](const V& x) {
                   return scaled_dot_product_attention(x[0], x[1], x[2], true);
                 }});
  check_cuda_op({"sdpa_fused_qkv_t100", {{2, 100, 3 * 2 * 32}}, [](const V& x) {
                   auto head = [&](int64_t w) {
                     return transpose(reshape(narrow(x[0], 2, w * 64, 64), {2, 100, 2, 32}), 1, 2);
                   };
                   return scaled_dot_product_attention(head(0), head(1), head(2), true);
                 }});
}

}  // namespace
}  // namespace trireme
