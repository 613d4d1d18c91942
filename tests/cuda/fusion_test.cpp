// Fused elementwise kernels on the GPU (kernels/cuda/fused.cu, compiled with NVRTC): a fused
// chain gives the unfused CUDA kernels' bits, in f32 and bf16, with broadcast inputs, casts, and
// a multiply followed by an add (which a compiler would contract into one FMA across the steps).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "graph/graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/fusion.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

Tensor on_gpu(const Tensor& t) { return to_device(t, Device::cuda(0)); }
// Traces fn on the GPU, fuses it into one call and checks the replay against the unfused replay
// and the eager (unfused kernels') result, bit for bit.
void expect_fused_equals_unfused(const graph::StepFn& fn, const std::vector<Tensor>& in, size_t steps) {
  graph::Graph g = graph::eliminate_dead_code(graph::trace(fn, in).graph);
  graph::Graph f = graph::fuse_elementwise(g);
  ASSERT_EQ(f.nodes.size(), 1u) << "the chain did not fuse (an NVRTC failure is logged above)";
  const FusedProgram* p = graph::fused_program(f.nodes[0]);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->steps.size(), steps);
  std::vector<Tensor> again;
  for (const Tensor& t : in) again.push_back(to_dtype(on_gpu(random_tensor(t.sizes(), 99 + again.size())), t.dtype()));
  Tensor unfused = graph::Executable(g).run(again)[0];
  Tensor fused = graph::Executable(f).run(again)[0];
  Tensor eager = fn(again)[0];
  EXPECT_TRUE(trireme::testing::bitwise_equal(fused, unfused)) << p->name;
  EXPECT_TRUE(trireme::testing::bitwise_equal(fused, eager)) << p->name;
}

}  // namespace

TEST(CudaFusion, BiasScaleGeluF32) {
  TRIREME_REQUIRE_GPU();
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {gelu(add(mul(in[0], 0.5), in[1]))};
  };
  expect_fused_equals_unfused(fn, {on_gpu(random_tensor({64, 1024}, 1)), on_gpu(random_tensor({1024}, 2))}, 3);
}

TEST(CudaFusion, MultiplyThenAddIsNotContractedF32) {
  TRIREME_REQUIRE_GPU();
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {sub(add(mul(in[0], in[1]), in[2]), mul(in[0], in[2]))};
  };
  std::vector<Tensor> in;
  for (uint64_t s = 1; s <= 3; ++s) in.push_back(on_gpu(random_tensor({100003}, s)));
  expect_fused_equals_unfused(fn, in, 4);
}

TEST(CudaFusion, Bf16ChainWithCastsAndBroadcast) {
  TRIREME_REQUIRE_GPU();
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor h = to_dtype(in[0], DType::bf16);
    return {to_dtype(add(mul(gelu(add(h, in[1])), h), 1.25), DType::f32)};  // in[1]: a bf16 bias
  };
  expect_fused_equals_unfused(
      fn, {on_gpu(random_tensor({32, 768}, 3)), to_dtype(on_gpu(random_tensor({768}, 4)), DType::bf16)}, 6);
}
