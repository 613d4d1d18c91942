// Shared by the CPU and CUDA tests of what static graphs fold into the norm kernels (kernels/nn.h,
// graph/norm_folds.h): on a device, an f32 layer or RMS norm writing bf16/f16 gives the bits of
// the f32 norm followed by a cast; its backward reading a 16-bit gradient gives the bits of
// reading that gradient widened, and its 16-bit copy of grad_x those of a cast; and a backward
// given an addend gives the bits of its grad_x followed by the add kernel.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"

namespace trireme::testing {

inline void expect_norm_edges_match_casts(Device dev, int64_t rows, int64_t cols) {
  auto bits_equal = [](const Tensor& a, const Tensor& b) {
    Tensor ca = contiguous(to_device(a, Device::cpu())), cb = contiguous(to_device(b, Device::cpu()));
    return ca.dtype() == cb.dtype() && ca.sizes() == cb.sizes() &&
           std::memcmp(ca.data_ptr(), cb.data_ptr(), size_t(ca.numel()) * ca.element_size()) == 0;
  };
  Generator gen(uint64_t(rows * 1000 + cols));
  auto rnd = [&](const Shape& s) { return to_device(randn(s, gen), dev); };
  auto empty = [&](const Shape& s, DType t = DType::f32) { return Tensor::empty(s, t, dev); };
  const Tensor x = rnd({rows, cols}), w = rnd({cols}), b = rnd({cols});
  const auto ln = find_kernel<LayerNormKernel>("layer_norm", dev, DType::f32);
  const auto rms = find_kernel<RmsNormKernel>("rms_norm", dev, DType::f32);
  const auto ln_back = find_kernel<LayerNormBackwardKernel>("layer_norm_backward", dev, DType::f32);
  const auto rms_back = find_kernel<RmsNormBackwardKernel>("rms_norm_backward", dev, DType::f32);
  Tensor y32 = empty({rows, cols}), mean = empty({rows}), rstd = empty({rows}), rms_rstd = empty({rows});
  Tensor none;
  ln(x, none, w, b, 1e-5, y32, none, mean, rstd);
  Tensor rms32 = empty({rows, cols});
  rms(x, none, w, 1e-5, rms32, none, rms_rstd);
  for (DType low : {DType::bf16, DType::f16}) {
    const std::string what = str_cat(dev, " ", rows, "x", cols, " ", low);
    Tensor y16 = empty({rows, cols}, low), m16 = empty({rows}), r16 = empty({rows});
    ln(x, none, w, b, 1e-5, y16, none, m16, r16);
    EXPECT_TRUE(bits_equal(y16, to_dtype(y32, low))) << "layer_norm " << what;
    EXPECT_TRUE(bits_equal(m16, mean) && bits_equal(r16, rstd)) << "layer_norm statistics " << what;
    rms(x, none, w, 1e-5, y16, none, r16);
    EXPECT_TRUE(bits_equal(y16, to_dtype(rms32, low))) << "rms_norm " << what;

    const Tensor g16 = to_dtype(rnd({rows, cols}), low), g32 = to_dtype(g16, DType::f32);
    std::vector<Tensor> a = {empty({rows, cols}), empty({cols}), empty({cols})};
    std::vector<Tensor> e = {empty({rows, cols}), empty({cols}), empty({cols})};
    // With a 16-bit copy of grad_x asked for (grad_x_edge), the copy is grad_x cast to 16 bits,
    // with and without an addend.
    Tensor edge = empty({rows, cols}, low);
    const Tensor addend = rnd({rows, cols});
    ln_back(g16, x, w, mean, rstd, Tensor(), a[0], edge, a[1], a[2]);
    ln_back(g32, x, w, mean, rstd, Tensor(), e[0], none, e[1], e[2]);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bits_equal(a[i], e[i])) << "layer_norm_backward " << i << " " << what;
    EXPECT_TRUE(bits_equal(edge, to_dtype(e[0], low))) << "layer_norm_backward's 16-bit grad_x " << what;
    ln_back(g16, x, w, mean, rstd, addend, a[0], edge, a[1], a[2]);
    EXPECT_TRUE(bits_equal(edge, to_dtype(a[0], low))) << "layer_norm_backward's 16-bit grad_x with an addend " << what;
    rms_back(g16, x, w, rms_rstd, Tensor(), a[0], edge, a[1]);
    rms_back(g32, x, w, rms_rstd, Tensor(), e[0], none, e[1]);
    EXPECT_TRUE(bits_equal(a[0], e[0]) && bits_equal(a[1], e[1])) << "rms_norm_backward " << what;
    EXPECT_TRUE(bits_equal(edge, to_dtype(e[0], low))) << "rms_norm_backward's 16-bit grad_x " << what;
    rms_back(g16, x, w, rms_rstd, addend, a[0], edge, a[1]);
    EXPECT_TRUE(bits_equal(edge, to_dtype(a[0], low))) << "rms_norm_backward's 16-bit grad_x with an addend " << what;
  }
}

inline void expect_norm_addends_match_adds(Device dev, int64_t rows, int64_t cols) {
  Generator gen(uint64_t(rows * 1000 + cols + 1));
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    auto rnd = [&](const Shape& s) { return to_device(to_dtype(randn(s, gen), t), dev); };
    auto empty = [&](const Shape& s, DType dt) { return Tensor::empty(s, dt, dev); };
    const Tensor x = rnd({rows, cols}), w = rnd({cols}), b = rnd({cols}), g = rnd({rows, cols}), r = rnd({rows, cols});
    const DType st = t == DType::f64 ? DType::f64 : DType::f32;
    Tensor y = empty({rows, cols}, t), mean = empty({rows}, st), rstd = empty({rows}, st);
    Tensor no_sum;
    find_kernel<LayerNormKernel>("layer_norm", dev, t)(x, Tensor(), w, b, 1e-5, y, no_sum, mean, rstd);
    const std::string what = str_cat(dev, " ", rows, "x", cols, " ", t);
    std::vector<Tensor> plain = {empty({rows, cols}, t), empty({cols}, t), empty({cols}, t)};
    std::vector<Tensor> added = {empty({rows, cols}, t), empty({cols}, t), empty({cols}, t)};
    const auto ln_back = find_kernel<LayerNormBackwardKernel>("layer_norm_backward", dev, t);
    Tensor no_edge;
    ln_back(g, x, w, mean, rstd, Tensor(), plain[0], no_edge, plain[1], plain[2]);
    ln_back(g, x, w, mean, rstd, r, added[0], no_edge, added[1], added[2]);
    const auto bits_equal = [](const Tensor& p, const Tensor& q) {
      Tensor cp = to_device(p, Device::cpu()), cq = to_device(q, Device::cpu());
      return std::memcmp(cp.data_ptr(), cq.data_ptr(), size_t(cp.numel()) * cp.element_size()) == 0;
    };
    EXPECT_TRUE(bits_equal(added[0], add(plain[0], r))) << "layer_norm_backward grad_x " << what;
    EXPECT_TRUE(bits_equal(added[1], plain[1]) && bits_equal(added[2], plain[2])) << "layer_norm_backward params " << what;
    const auto rms_back = find_kernel<RmsNormBackwardKernel>("rms_norm_backward", dev, t);
    rms_back(g, x, w, rstd, Tensor(), plain[0], no_edge, plain[1]);
    rms_back(g, x, w, rstd, r, added[0], no_edge, added[1]);
    EXPECT_TRUE(bits_equal(added[0], add(plain[0], r)) && bits_equal(added[1], plain[1])) << "rms_norm_backward " << what;
  }
}

// A forward given a residual writes the bits of the add kernel's x + residual to its sum and
// normalises them: y and the statistics are those of the norm of that sum. The residual has x's
// dtype, or beside an f32 x the 16-bit dtype of y (then the add kernel reads it cast to f32).
inline void expect_norm_residuals_match_adds(Device dev, int64_t rows, int64_t cols) {
  Generator gen(uint64_t(rows * 1000 + cols + 2));
  struct Case {
    DType x, y, residual;
  };
  const std::vector<Case> cases = {{DType::f32, DType::f32, DType::f32},   {DType::f32, DType::bf16, DType::f32},
                                   {DType::f32, DType::bf16, DType::bf16}, {DType::f32, DType::f16, DType::f16},
                                   {DType::bf16, DType::bf16, DType::bf16}, {DType::f64, DType::f64, DType::f64}};
  const auto bits_equal = [](const Tensor& p, const Tensor& q) {
    Tensor cp = to_device(p, Device::cpu()), cq = to_device(q, Device::cpu());
    return cp.dtype() == cq.dtype() && cp.sizes() == cq.sizes() &&
           std::memcmp(cp.data_ptr(), cq.data_ptr(), size_t(cp.numel()) * cp.element_size()) == 0;
  };
  for (const Case& c : cases) {
    auto rnd = [&](const Shape& s, DType t) { return to_device(to_dtype(randn(s, gen), t), dev); };
    auto empty = [&](const Shape& s, DType t) { return Tensor::empty(s, t, dev); };
    const Tensor x = rnd({rows, cols}, c.x), res = rnd({rows, cols}, c.residual), w = rnd({cols}, c.x),
                 b = rnd({cols}, c.x);
    const Tensor expected_sum = add(x, to_dtype(res, c.x));  // the cast and the add kernel, as eager runs them
    const DType st = c.x == DType::f64 ? DType::f64 : DType::f32;
    const std::string what = str_cat(dev, " ", rows, "x", cols, " x ", c.x, " y ", c.y, " residual ", c.residual);
    Tensor none, y = empty({rows, cols}, c.y), sum = empty({rows, cols}, c.x), mean = empty({rows}, st),
                 rstd = empty({rows}, st);
    Tensor ye = empty({rows, cols}, c.y), me = empty({rows}, st), re = empty({rows}, st);
    const auto ln = find_kernel<LayerNormKernel>("layer_norm", dev, c.x);
    ln(x, res, w, b, 1e-5, y, sum, mean, rstd);
    ln(expected_sum, none, w, b, 1e-5, ye, none, me, re);
    EXPECT_TRUE(bits_equal(sum, expected_sum)) << "layer_norm's sum " << what;
    EXPECT_TRUE(bits_equal(y, ye) && bits_equal(mean, me) && bits_equal(rstd, re)) << "layer_norm " << what;
    const auto rms = find_kernel<RmsNormKernel>("rms_norm", dev, c.x);
    sum = empty({rows, cols}, c.x);
    rms(x, res, w, 1e-5, y, sum, rstd);
    rms(expected_sum, none, w, 1e-5, ye, none, re);
    EXPECT_TRUE(bits_equal(sum, expected_sum)) << "rms_norm's sum " << what;
    EXPECT_TRUE(bits_equal(y, ye) && bits_equal(rstd, re)) << "rms_norm " << what;
  }
  // A residual of neither x's dtype nor y's is refused, naming the three.
  const Tensor x = to_device(randn({rows, cols}, gen), dev), res = to_dtype(x, DType::f16);
  Tensor y = Tensor::empty({rows, cols}, DType::bf16, dev), sum = Tensor::empty({rows, cols}, DType::f32, dev),
         rstd = Tensor::empty({rows}, DType::f32, dev);
  try {
    find_kernel<RmsNormKernel>("rms_norm", dev, DType::f32)(x, res, Tensor(), 1e-5, y, sum, rstd);
    ADD_FAILURE() << "an f16 residual beside a bf16 output was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f16 residual beside a f32 input and a bf16 output"), std::string::npos)
        << e.what();
  }
}

}  // namespace trireme::testing
