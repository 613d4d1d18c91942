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
  ln(x, w, b, 1e-5, y32, mean, rstd);
  Tensor rms32 = empty({rows, cols});
  rms(x, w, 1e-5, rms32, rms_rstd);
  for (DType low : {DType::bf16, DType::f16}) {
    const std::string what = str_cat(dev, " ", rows, "x", cols, " ", low);
    Tensor y16 = empty({rows, cols}, low), m16 = empty({rows}), r16 = empty({rows});
    ln(x, w, b, 1e-5, y16, m16, r16);
    EXPECT_TRUE(bits_equal(y16, to_dtype(y32, low))) << "layer_norm " << what;
    EXPECT_TRUE(bits_equal(m16, mean) && bits_equal(r16, rstd)) << "layer_norm statistics " << what;
    rms(x, w, 1e-5, y16, r16);
    EXPECT_TRUE(bits_equal(y16, to_dtype(rms32, low))) << "rms_norm " << what;

    const Tensor g16 = to_dtype(rnd({rows, cols}), low), g32 = to_dtype(g16, DType::f32);
    std::vector<Tensor> a = {empty({rows, cols}), empty({cols}), empty({cols})};
    std::vector<Tensor> e = {empty({rows, cols}), empty({cols}), empty({cols})};
    // With a 16-bit copy of grad_x asked for (grad_x_edge), the copy is grad_x cast to 16 bits,
    // with and without an addend.
    Tensor none, edge = empty({rows, cols}, low);
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
    find_kernel<LayerNormKernel>("layer_norm", dev, t)(x, w, b, 1e-5, y, mean, rstd);
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

}  // namespace trireme::testing
