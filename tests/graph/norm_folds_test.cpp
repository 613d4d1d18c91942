// Folds into norms (graph/norm_folds.h): the norm kernels' 16-bit edge gives the bits of the f32
// norm beside a cast, their backward's addend those of an add after it; the passes remove exactly
// the casts around an autocast norm, the add of a residual stream's gradients and that gradient's
// cast to 16 bits.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "norm_edge_check.h"
#include "trireme/amp/autocast.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/norm_folds.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

constexpr int64_t kRows = 300, kCols = 96;  // enough rows for the CPU kernels to split among threads

int64_t count_op(const graph::Graph& g, const std::string& op) {
  int64_t n = 0;
  for (const graph::Node& node : g.nodes) n += node.op == op;
  return n;
}

// Two pre-norm residual blocks under bf16 autocast: x0 = in + p, x1 = x0 + (N_a(x0) m_a),
// x2 = x1 + (N_b(x1) m_b), the loss sum(x2²); N_a a layer norm, N_b a layer norm or an RMS norm.
// Each branch's bf16 output is widened by a cast before its add.
struct TwoResidualBlocks {
  explicit TwoResidualBlocks(bool rms_b) {
    step = [this, rms_b](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      Tensor loss;
      {
        amp::AutocastGuard autocast(DeviceType::cpu, DType::bf16);
        Tensor x0 = add(in[0], p);
        Tensor x1 = add(x0, matmul(layer_norm(x0, wa, Tensor()), ma));
        Tensor x2 = add(x1, matmul(rms_b ? rms_norm(x1, wb) : layer_norm(x1, wb, Tensor()), mb));
        loss = sum(mul(x2, x2));
      }
      return trireme::testing::backward_loss_and_take_grads(loss, {&p, &wa, &wb, &ma, &mb});
    };
  }
  graph::Graph traced() const {
    return graph::eliminate_dead_code(graph::trace(step, {random_tensor({kRows, kCols}, 11)}).graph);
  }
  Tensor p = random_tensor({kRows, kCols}, 5).set_requires_grad(true);
  Tensor wa = random_tensor({kCols}, 6).set_requires_grad(true), wb = random_tensor({kCols}, 7).set_requires_grad(true);
  Tensor ma = random_tensor({kCols, kCols}, 8).set_requires_grad(true);
  Tensor mb = random_tensor({kCols, kCols}, 9).set_requires_grad(true);
  graph::StepFn step;
};

// A fold keeps the bits: `after` runs to the outputs of `before` and of the eager step, and its
// memory plan has no conflicts.
void expect_fold_keeps_the_bits(const graph::Graph& before, const graph::Graph& after, const graph::StepFn& step) {
  EXPECT_TRUE(graph::plan_conflicts(after, graph::plan_memory(after)).empty());
  const Tensor in = random_tensor({kRows, kCols}, 12);
  std::vector<Tensor> a = graph::Executable(before).run({in}), e = graph::Executable(after).run({in}), eager = step({in});
  ASSERT_EQ(a.size(), e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(a[i], e[i])) << "output " << i;
    EXPECT_TRUE(bitwise_equal(e[i], eager[i])) << "output " << i;
  }
}

}  // namespace

TEST(NormEdge, SixteenBitEdgesGiveTheBitsOfTheF32NormBesideACast) {
  trireme::testing::expect_norm_edges_match_casts(Device::cpu(), kRows, kCols);
}

TEST(NormEdge, ABackwardsAddendGivesTheBitsOfAnAddAfterIt) {
  trireme::testing::expect_norm_addends_match_adds(Device::cpu(), kRows, kCols);
}

TEST(NormEdge, AForwardsResidualGivesTheBitsOfTheAddBeforeIt) {
  trireme::testing::expect_norm_residuals_match_adds(Device::cpu(), kRows, kCols);
}

TEST(NormEdge, OnlyAnF32InputTakesASixteenBitEdge) {
  const Tensor x = to_dtype(random_tensor({4, 8}, 1), DType::bf16);
  Tensor y = Tensor::empty({4, 8}, DType::f16), r = Tensor::empty({4}, DType::f32);
  try {
    Tensor no_sum;
    find_kernel<RmsNormKernel>("rms_norm", Device::cpu(), DType::bf16)(x, Tensor(), Tensor(), 1e-5, y, no_sum, r);
    FAIL() << "a bf16 norm wrote an f16 output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only f32 inputs may have a bf16 or f16"), std::string::npos) << e.what();
  }
}

TEST(NormFolds, AnAutocastStepLosesTheCastsAroundItsNormsAndTheAddOfTheirGradients) {
  // Under bf16 autocast: a layer norm and an RMS norm, each followed by a matmul (which casts the
  // norm's f32 output to bf16); their backwards read f32 copies of the matmuls' bf16 gradients.
  Tensor p = random_tensor({kRows, kCols}, 5).set_requires_grad(true);
  Tensor w = random_tensor({kCols}, 6).set_requires_grad(true), b = random_tensor({kCols}, 7).set_requires_grad(true);
  Tensor w2 = random_tensor({kCols}, 8).set_requires_grad(true);
  Tensor m1 = random_tensor({kCols, 32}, 9).set_requires_grad(true), m2 = random_tensor({kCols, 32}, 10).set_requires_grad(true);
  const std::vector<Tensor*> params = {&p, &w, &b, &w2, &m1, &m2};
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      amp::AutocastGuard autocast(DeviceType::cpu, DType::bf16);
      Tensor x = add(in[0], p);
      Tensor h = add(matmul(layer_norm(x, w, b), m1), matmul(rms_norm(x, w2), m2));
      loss = sum(to_dtype(h, DType::f32));
    }
    return trireme::testing::backward_loss_and_take_grads(loss, params);
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, {random_tensor({kRows, kCols}, 11)}).graph);
  const graph::Graph f = graph::fold_norm_casts(g);
  // Two casts of the forward (the norms' outputs) and two of the backward (their gradients).
  EXPECT_EQ(f.nodes.size(), g.nodes.size() - 4);
  EXPECT_EQ(count_op(f, "copy"), count_op(g, "copy") - 4);
  for (const graph::Node& n : f.nodes) {
    if (n.op == "layer_norm" || n.op == "rms_norm") EXPECT_EQ(f.values[size_t(n.args[n.op == "layer_norm" ? 4 : 3])].dtype, DType::bf16);
    if (n.op == "layer_norm_backward" || n.op == "rms_norm_backward") EXPECT_EQ(f.values[size_t(n.args[0])].dtype, DType::bf16);
  }
  // x's gradient sums the two norms' grad_x: the later backward takes the earlier's as its addend.
  const graph::Graph fa = graph::fold_norm_gradient_adds(f);
  EXPECT_EQ(fa.nodes.size(), f.nodes.size() - 1);
  EXPECT_EQ(count_op(fa, "add"), count_op(f, "add") - 1);
  for (const graph::Graph* h : {&f, &fa}) {
    EXPECT_TRUE(graph::plan_conflicts(*h, graph::plan_memory(*h)).empty());
    EXPECT_LT(graph::plan_memory(*h).intermediate_bytes, graph::plan_memory(g).intermediate_bytes);
  }
  expect_fold_keeps_the_bits(g, fa, step);
}

TEST(NormFolds, AResidualGradientsCastTo16BitsIsWrittenByTheNormBackwardThatMakesIt) {
  // x1's gradient is LN_b's backward plus x2's (the add folded in); the first residual block's
  // bf16 matmul reads it cast to bf16, which LN_b's backward now writes beside it.
  TwoResidualBlocks blocks(/*rms_b=*/false);
  const graph::Graph before = graph::fold_norm_gradient_adds(graph::fold_norm_casts(blocks.traced()));
  const graph::Graph after = graph::fold_norm_gradient_casts(before);
  EXPECT_EQ(after.nodes.size(), before.nodes.size() - 1);
  EXPECT_EQ(count_op(after, "copy"), count_op(before, "copy") - 1);
  int with_edge = 0;
  for (const graph::Node& n : after.nodes) {
    if (n.op == "layer_norm_backward" && n.args[7] >= 0) {
      ++with_edge;
      EXPECT_EQ(after.values[size_t(n.args[7])].dtype, DType::bf16);
    }
  }
  EXPECT_EQ(with_edge, 1);
  expect_fold_keeps_the_bits(before, after, blocks.step);
}

TEST(NormFolds, TheAddOfAResidualStreamIsWrittenByTheNormThatReadsIt) {
  // LN_a takes in and p (two f32 values) and writes x0; RMS_b takes x0 and the branch's bf16
  // output (the cast that widened it for the add gone too) and writes x1; x2's add has no norm
  // after it and stays.
  TwoResidualBlocks blocks(/*rms_b=*/true);
  const graph::Graph before = graph::fold_norm_casts(blocks.traced());
  const graph::Graph after = graph::fold_norm_residual_adds(before);
  EXPECT_EQ(after.nodes.size(), before.nodes.size() - 3);
  EXPECT_EQ(count_op(after, "add"), count_op(before, "add") - 2);
  EXPECT_EQ(count_op(after, "copy"), count_op(before, "copy") - 1);
  for (const graph::Node& n : after.nodes) {
    if (n.op != "layer_norm" && n.op != "rms_norm") continue;
    const size_t y = n.op == "layer_norm" ? 4 : 3;
    ASSERT_GE(n.args[1], 0) << n.op << " has no residual";
    ASSERT_GE(n.args[y + 1], 0) << n.op << " writes no sum";
    EXPECT_EQ(after.values[size_t(n.args[1])].dtype, n.op == "layer_norm" ? DType::f32 : DType::bf16) << n.op;
  }
  expect_fold_keeps_the_bits(before, after, blocks.step);
}

TEST(NormFolds, AResidualSumReadBeforeItsNormKeepsItsAdd) {
  Tensor w = random_tensor({kCols}, 6);
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor x = add(in[0], in[1]);
    Tensor twice = mul(x, 2.0);  // x is read before the norm
    return {layer_norm(x, w, Tensor()), twice};
  };
  const graph::Graph g =
      graph::eliminate_dead_code(graph::trace(step, {random_tensor({kRows, kCols}, 1), random_tensor({kRows, kCols}, 2)}).graph);
  EXPECT_EQ(graph::fold_norm_residual_adds(g).nodes.size(), g.nodes.size());
}

TEST(NormFolds, AnF32NormWhoseOutputIsAlsoReadElsewhereKeepsItsCast) {
  Tensor w = random_tensor({kCols}, 6);
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor y = layer_norm(in[0], w, Tensor());
    return {to_dtype(y, DType::bf16), mul(y, 2.0)};  // y itself is read by the mul too
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, {random_tensor({kRows, kCols}, 1)}).graph);
  EXPECT_EQ(graph::fold_norm_casts(g).nodes.size(), g.nodes.size());
}
