// The multi-tensor AdamW kernel (adamw_multi) against one adamw launch per tensor, bit for bit:
// called directly (odd sizes, unaligned tensors, more tensors and chunks than one launch's table
// holds, f32 and bf16 with f32 moments), and in static training with the graph pass that merges
// the updates, captured as a CUDA graph and not (docs/STATIC_GRAPH.md, "Passes").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "graph/many_params_step.h"
#include "graph/graph_test_util.h"
#include "trireme/core/rng.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/static_function.h"
#include "trireme/kernels/optim.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"

using namespace trireme;

namespace {

// The four tensors and the hyper-parameters of each update; every third tensor is a view at
// element 1 of a larger buffer (contiguous, not 16-byte aligned: the kernels' element path).
struct Updates {
  std::vector<Tensor> p, g, m, v;
  std::vector<AdamWHyper> h;
};

Updates make_updates(DType dtype, const std::vector<int64_t>& sizes, uint64_t seed) {
  const Device dev = Device::cuda(0);
  const DType state = dtype == DType::f64 ? DType::f64 : DType::f32;
  Generator gen(seed);
  Updates u;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    const bool unaligned = i % 3 == 2;
    auto make = [&](DType dt, bool positive) {
      Tensor t = randn({n + (unaligned ? 1 : 0)}, gen);
      if (positive) t = mul(abs(t), 1e-2);
      t = to_device(to_dtype(t, dt), dev);
      return unaligned ? narrow(t, 0, 1, n) : t;
    };
    u.p.push_back(make(dtype, false));
    u.g.push_back(make(dtype, false));
    u.m.push_back(make(state, false));
    u.v.push_back(make(state, true));
    AdamWHyper h;
    h.lr = 1e-3 * double(i % 7 + 1);
    h.beta2 = i % 2 ? 0.999 : 0.95;
    h.weight_decay = i % 2 ? 0.1 : 0.0;
    h.bias_correction1 = 1.0 - std::pow(h.beta1, 3.0);
    h.bias_correction2 = 1.0 - std::pow(h.beta2, 3.0);
    u.h.push_back(h);
  }
  return u;
}

void expect_multi_equals_single(DType dtype, const std::vector<int64_t>& sizes) {
  Updates single = make_updates(dtype, sizes, 7), multi = make_updates(dtype, sizes, 7);
  // The largest tensor before the updates (a one-element bf16 one may round back to its value).
  const size_t largest = size_t(std::max_element(sizes.begin(), sizes.end()) - sizes.begin());
  const Tensor initial = clone(single.p[largest]);
  auto one = find_kernel<AdamWKernel>("adamw", Device::cuda(0), dtype);
  auto all = kernel_registry().find<AdamWMultiKernel>("adamw_multi", DeviceType::cuda, dtype);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < sizes.size(); ++i) one(single.p[i], single.g[i], single.m[i], single.v[i], single.h[i]);
    std::vector<AdamWUpdate> updates;
    for (size_t i = 0; i < sizes.size(); ++i) updates.push_back({&multi.p[i], &multi.g[i], &multi.m[i], &multi.v[i], &multi.h[i]});
    all(updates);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(trireme::testing::bitwise_equal(single.p[i], multi.p[i])) << dtype_name(dtype) << " param " << i << " of " << sizes[i];
    EXPECT_TRUE(trireme::testing::bitwise_equal(single.m[i], multi.m[i])) << dtype_name(dtype) << " exp_avg " << i;
    EXPECT_TRUE(trireme::testing::bitwise_equal(single.v[i], multi.v[i])) << dtype_name(dtype) << " exp_avg_sq " << i;
  }
  EXPECT_FALSE(trireme::testing::bitwise_equal(single.p[largest], initial));  // the updates changed it
}

// Sizes around the vector width and the smallest chunk (2048 elements, for a call this small), an
// empty tensor, and more tensors than one launch's table has room for.
std::vector<int64_t> odd_sizes() {
  std::vector<int64_t> s = {1, 3, 4, 5, 0, 17, 255, 1000, 2047, 2048, 2049, 65537, 200003};
  for (int i = 0; i < 110; ++i) s.push_back(1 + (i * 37) % 300);
  return s;
}

}  // namespace

TEST(CudaMultiTensorAdamW, EqualsOneLaunchPerTensorF32) {
  TRIREME_REQUIRE_GPU();
  expect_multi_equals_single(DType::f32, odd_sizes());
}

TEST(CudaMultiTensorAdamW, EqualsOneLaunchPerTensorBf16WithF32Moments) {
  TRIREME_REQUIRE_GPU();
  expect_multi_equals_single(DType::bf16, odd_sizes());
}

TEST(CudaMultiTensorAdamW, EqualsOneLaunchPerTensorF64) {
  TRIREME_REQUIRE_GPU();
  expect_multi_equals_single(DType::f64, {1, 2, 3, 65537, 5, 100000});
}

TEST(CudaMultiTensorAdamW, ChunksBetweenTheSmallestAndTheLargest) {
  TRIREME_REQUIRE_GPU();
  // 5M elements: chunks of 8192, the last of each tensor partial; tensors split across chunks.
  expect_multi_equals_single(DType::bf16, {3, 4'000'003, 8191, 8193, 1'000'000});
}

TEST(CudaMultiTensorAdamW, ATensorOfMoreChunksThanOneTableSplitsIntoLaunches) {
  TRIREME_REQUIRE_GPU();
  expect_multi_equals_single(DType::f32, {1000, (int64_t(1100) << 16) + 7, 3});
}

namespace {

struct Trained {
  std::vector<Tensor> losses, params;
  graph::Graph graph;
  graph::CaptureSummary capture;
};

Trained train(bool is_static, bool merge, bool captured) {
  trireme::testing::ManyParams m(Device::cuda(0));
  graph::StaticOptions o;
  o.multi_tensor_adamw = merge;
  o.cuda_graph = captured;
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return m.step(in); }, o);
  Trained t;
  for (int s = 0; s < 6; ++s) {
    m.first.set_lr(1e-2 / double(s + 1));
    m.second.set_lr(3e-3 * double(s + 1));
    Tensor scale = full({1}, 0.5 + 0.25 * s, DType::f32, Device::cuda(0));
    std::vector<Tensor> out = !is_static || s == 0 ? m.step({scale}) : f({scale});
    t.losses.push_back(to_device(out[0], Device::cpu()));
  }
  for (const Tensor& p : m.params) t.params.push_back(to_device(p.detach(), Device::cpu()));
  if (f.last()) {
    t.graph = f.last()->graph();
    t.capture = f.last()->capture_summary();
  }
  return t;
}

void expect_same(const Trained& a, const Trained& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) EXPECT_TRUE(trireme::testing::bitwise_equal(a.losses[s], b.losses[s])) << what << ": step " << s;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(trireme::testing::bitwise_equal(a.params[i], b.params[i])) << what << ": param " << i;
}

}  // namespace

TEST(CudaMultiTensorAdamW, StaticTrainingWithMergedUpdatesEqualsEagerCapturedAndNot) {
  TRIREME_REQUIRE_GPU();
  const Trained eager = train(false, false, false);
  const Trained merged_captured = train(true, true, true);
  const Trained merged_uncaptured = train(true, true, false);
  const Trained unmerged_captured = train(true, false, true);
  expect_same(merged_captured, eager, "merged, captured vs eager");
  expect_same(merged_uncaptured, eager, "merged, uncaptured vs eager");
  expect_same(unmerged_captured, eager, "one launch per tensor, captured vs eager");
  // The f32 and the bf16 updates: one call each, of 100 and 50 parameters (more than one launch's
  // table holds for the f32 one), inside the one CUDA graph with their scalars in device memory.
  const auto counts = graph::op_counts(merged_captured.graph);
  EXPECT_EQ(counts.count("adamw"), 0u);
  ASSERT_EQ(counts.count("adamw_multi"), 1u);
  EXPECT_EQ(counts.at("adamw_multi"), 2);
  EXPECT_EQ(merged_captured.capture.graphs, 1);
  EXPECT_EQ(merged_captured.capture.outside_calls, 0);
  EXPECT_EQ(graph::op_counts(unmerged_captured.graph).at("adamw"), 150);
  EXPECT_FALSE(trireme::testing::bitwise_equal(eager.losses[2], eager.losses[5]));
}
