// Shared by the CPU and CUDA tests of the ops over many tensors (ops/multi_tensor.h) and of the
// loss scaler's unscale: on a device, sum_squares_all gives the bits of sum_squares per tensor
// added in order, mul_all_ the bits of mul_ per tensor, and GradScaler::unscale the bits and the
// flag of amp_unscale per tensor, each in one kernel call per dtype.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "counting_tape.h"
#include "expect_error.h"
#include "graph/graph_test_util.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/kernels/amp.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/multi_tensor.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme::testing {

// Tensors of the given sizes and dtype on `dev`, random, from one seed.
inline std::vector<Tensor> random_tensors(Device dev, const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  std::vector<Tensor> out;
  for (int64_t n : sizes) out.push_back(to_device(to_dtype(random_tensor({n}, seed++), dtype), dev));
  return out;
}

inline Tensor sum_squares_one_by_one(const std::vector<Tensor>& xs, Device dev) {
  Tensor total = zeros({}, DType::f64, dev);
  for (const Tensor& x : xs) total = add(total, sum_squares(x));
  return total;
}

inline void expect_sum_squares_all_matches_sum_squares(Device dev) {
  // Empty, one element, one and a few pieces of a block, and more than a launch's table of
  // tensors (sizes that cross the CPU's 2^16-element blocks and the GPU's 8192-element pieces).
  std::vector<int64_t> sizes = {0, 1, 8191, 8193, 65535, 65537, 300000, 7};
  for (int k = 0; k < 500; ++k) sizes.push_back(1 + k % 37);
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const std::vector<Tensor> xs = random_tensors(dev, sizes, dtype, 5);
    CountingTape tape;
    const Tensor all = sum_squares_all(xs, dev);
    EXPECT_EQ(tape.calls["sum_squares_many"], 1) << dtype;
    EXPECT_EQ(tape.calls["sum_squares"], 0) << dtype;
    EXPECT_EQ(all.dtype(), DType::f64);
    EXPECT_EQ(all.device(), dev);
    EXPECT_TRUE(bitwise_equal(all, sum_squares_one_by_one(xs, dev))) << dtype;
  }
  // Mixed dtypes and a strided view: a call per tensor, the same bits.
  std::vector<Tensor> mixed = random_tensors(dev, {70000, 5}, DType::f32, 9);
  mixed.push_back(random_tensors(dev, {9}, DType::bf16, 11)[0]);
  mixed.push_back(transpose(to_device(random_tensor({4, 6}, 12), dev), 0, 1));
  CountingTape tape;
  EXPECT_TRUE(bitwise_equal(sum_squares_all(mixed, dev), sum_squares_one_by_one(mixed, dev)));
  EXPECT_EQ(tape.calls["sum_squares_many"], 0);
  EXPECT_EQ(to_device(sum_squares_all({}, dev), Device::cpu()).item(), 0.0);
}

inline void expect_mul_all_matches_mul(Device dev) {
  auto make = [&] {
    std::vector<Tensor> xs = random_tensors(dev, {0, 3, 70001, 8192}, DType::f32, 21);
    for (const Tensor& x : random_tensors(dev, {513, 2}, DType::bf16, 31)) xs.push_back(x);
    xs.push_back(random_tensors(dev, {100}, DType::f64, 41)[0]);
    xs.push_back(transpose(to_device(random_tensor({5, 3}, 51), dev), 0, 1).detach());  // a strided view
    return xs;
  };
  NoGradGuard no_grad;
  for (double s : {0.3713, 1.0, 1e-3}) {
    std::vector<Tensor> host = make(), on_device = make(), one_by_one = make();
    for (Tensor& x : one_by_one) mul_(x, s);
    CountingTape tape;
    mul_all_(host, s);
    EXPECT_EQ(tape.calls["scale_many"], 4) << "f32, bf16, f64 and the view";
    EXPECT_EQ(tape.calls["mul_scalar"], 0);
    mul_all_(on_device, full({1}, s, DType::f64, dev));
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_TRUE(bitwise_equal(host[i], one_by_one[i])) << "tensor " << i << " times " << s;
      EXPECT_TRUE(bitwise_equal(on_device[i], one_by_one[i])) << "tensor " << i << " times " << s;
    }
  }
  std::vector<Tensor> xs = make();
  expect_error([&] { mul_all_(xs, full({1}, 2.0, DType::f32, dev)); }, {"mul_all_: the factor must be one f64 element"});
  std::vector<Tensor> leaf = {full({3}, 1.0, DType::f32, dev)};
  leaf[0].set_requires_grad(true);
  autograd::GradModeGuard grad_on(true);
  expect_error([&] { mul_all_(leaf, 2.0); }, {"mul_all_: an in-place write to a tensor that requires grad"});
}

inline void expect_unscale_matches_amp_unscale_per_tensor(Device dev) {
  for (int inject = 0; inject < 3; ++inject) {  // none, an inf, a NaN (in a later tensor)
    auto make = [&] {
      std::vector<Tensor> grads = random_tensors(dev, {0, 3, 70001, 8192}, DType::f32, 61);
      for (const Tensor& g : random_tensors(dev, {513, 2}, DType::f16, 71)) grads.push_back(g);
      grads.push_back(transpose(to_device(random_tensor({5, 3}, 81), dev), 0, 1).detach());  // a strided view
      if (inject > 0) {
        Tensor slot = narrow(grads[2], 0, 65600, 1);
        copy_(slot, full({1}, inject == 1 ? std::numeric_limits<double>::infinity() : NAN, DType::f32, dev));
      }
      return grads;
    };
    std::vector<Tensor> one_by_one = make(), together = make();
    Tensor flag = zeros({1}, DType::f32, dev);
    for (Tensor& g : one_by_one) {
      Tensor c = contiguous(g);
      find_kernel<AmpUnscaleKernel>("amp_unscale", dev, g.dtype())(c, flag, 1.0 / 1024.0);
      copy_(g, c);
    }
    amp::GradScaler scaler({.init_scale = 1024.0});
    CountingTape tape;
    scaler.unscale(together);
    EXPECT_EQ(tape.calls["amp_unscale_many"], 2) << "f32 and f16";
    EXPECT_EQ(tape.calls["amp_unscale"], 1) << "the view";
    for (size_t i = 0; i < together.size(); ++i) EXPECT_TRUE(bitwise_equal(together[i], one_by_one[i])) << i;
    EXPECT_TRUE(bitwise_equal(scaler.found_inf(), flag)) << "inject " << inject;
    EXPECT_EQ(to_device(flag, Device::cpu()).item(), inject > 0 ? 1.0 : 0.0);
  }
}

}  // namespace trireme::testing
