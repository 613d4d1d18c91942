// Folds into GEMMs (graph/gemm_folds.h): an MLP's GELU and GELU's backward become part of the
// products beside them, and on the CPU, where no epilogue does the work, the step keeps its bits.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/amp/autocast.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/gemm_folds.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

int64_t count_op(const graph::Graph& g, const std::string& op) {
  int64_t n = 0;
  for (const graph::Node& node : g.nodes) n += node.op == op;
  return n;
}

// A GPT MLP on (B, T, C) inputs: linear, GELU, linear, and a loss, with the backward.
void expect_mlp_folds(bool autocast) {
  constexpr int64_t C = 48;
  Tensor w1 = random_tensor({4 * C, C}, 1).set_requires_grad(true), b1 = random_tensor({4 * C}, 2).set_requires_grad(true);
  Tensor w2 = random_tensor({C, 4 * C}, 3).set_requires_grad(true);
  const std::vector<Tensor*> params = {&w1, &b1, &w2};
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      amp::AutocastGuard guard(DeviceType::cpu, DType::bf16, autocast);
      Tensor y = linear(gelu(linear(in[0], w1, b1)), w2);
      loss = sum(mul(to_dtype(y, DType::f32), to_dtype(y, DType::f32)));
    }
    return trireme::testing::backward_loss_and_take_grads(loss, params);
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, {random_tensor({3, 50, C}, 4)}).graph);
  const graph::Graph f = graph::fold_gelu_into_gemms(g);
  EXPECT_EQ(count_op(g, "gelu_tanh"), 1);
  EXPECT_EQ(count_op(g, "gelu_tanh_backward"), 1);
  EXPECT_EQ(count_op(f, "gelu_tanh"), 0);
  EXPECT_EQ(count_op(f, "gelu_tanh_backward"), 0);
  EXPECT_EQ(count_op(f, "matmul_gelu"), 1);
  EXPECT_EQ(count_op(f, "matmul_gelu_backward"), 1);
  EXPECT_EQ(f.nodes.size(), g.nodes.size() - 2);
  EXPECT_TRUE(graph::plan_conflicts(f, graph::plan_memory(f)).empty());
  // GELU's output gradient is never written: one (B·T, 4C) intermediate fewer.
  EXPECT_LT(graph::plan_memory(f).intermediate_bytes, graph::plan_memory(g).intermediate_bytes);
  const Tensor in = random_tensor({3, 50, C}, 5);
  std::vector<Tensor> unfolded = graph::Executable(g).run({in}), folded = graph::Executable(f).run({in}), eager = step({in});
  ASSERT_EQ(unfolded.size(), folded.size());
  for (size_t i = 0; i < folded.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(folded[i], unfolded[i])) << "output " << i;
    EXPECT_TRUE(bitwise_equal(folded[i], eager[i])) << "output " << i;
  }
}

}  // namespace

TEST(GemmFolds, AnMlpStepLosesItsGeluCallsAndKeepsItsBitsOnTheCpu) { expect_mlp_folds(/*autocast=*/false); }

TEST(GemmFolds, AnAutocastMlpStepLosesItsGeluCallsAndKeepsItsBitsOnTheCpu) { expect_mlp_folds(/*autocast=*/true); }

TEST(GemmFolds, OtherGelusAndProductsReadBeforeTheirGeluStayUnfolded) {
  Tensor w = random_tensor({32, 24}, 1);
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor erf_form = gelu(matmul(in[0], w), GeluApprox::none);  // the epilogue's GELU is the tanh form
    Tensor y = matmul(in[0], w);
    Tensor doubled = mul(y, 2.0);  // read before GELU reads it: GELU cannot move up to the product
    return {erf_form, add(gelu(y), doubled)};
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, {random_tensor({16, 32}, 2)}).graph);
  const graph::Graph f = graph::fold_gelu_into_gemms(g);
  EXPECT_EQ(f.nodes.size(), g.nodes.size());
  EXPECT_EQ(count_op(f, "matmul_gelu"), 0);
}
