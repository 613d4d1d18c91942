// The clipping merges (graph/multi_tensor.h: merge_sum_squares, merge_scales): a traced clip's sum
// of squares and scale, a call per tensor, become one call each with the bits of the calls they
// replace; a write or a read that a merged call would cross keeps those calls as they are.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/multi_tensor.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/multi_tensor.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

// Tensors of several sizes, one of them longer than a CPU chunk of the kernels.
std::vector<Tensor> tensors(uint64_t seed) {
  return {random_tensor({3, 5}, seed), random_tensor({7}, seed + 1), random_tensor({70001}, seed + 2),
          random_tensor({64, 33}, seed + 3)};
}

int64_t count(const graph::Graph& g, const std::string& op) {
  auto counts = graph::op_counts(g);
  return counts.count(op) ? counts.at(op) : 0;
}

// As a clip records it: the tensors' summed squares, a one-element f64 factor made from them, and
// every tensor scaled by it in place. `between` runs after the first tensor's scale.
std::vector<Tensor> clip(const std::vector<Tensor>& in, const std::function<void(std::vector<Tensor>&)>& between = {}) {
  std::vector<Tensor> g;
  for (const Tensor& x : in) g.push_back(clone(x));  // intermediates, as gradients are
  const Tensor squares = sum_squares_all(g, Device::cpu());
  const Tensor factor = div(full({1}, 0.75, DType::f64), add(sqrt(squares), 1e-6));
  if (between) {
    mul_all_(std::span<Tensor>(g.data(), 1), factor);
    between(g);
    mul_all_(std::span<Tensor>(g.data() + 1, g.size() - 1), factor);
  } else {
    mul_all_(g, factor);
  }
  g.push_back(squares);
  return g;
}

// `merged` runs to the bits of `traced` and of eager (`step`) on other inputs.
void expect_same_bits(const graph::Graph& traced, const graph::Graph& merged, const graph::StepFn& step) {
  EXPECT_TRUE(graph::plan_conflicts(merged, graph::plan_memory(merged)).empty());
  const std::vector<Tensor> in = tensors(50);
  const std::vector<Tensor> a = graph::Executable(traced).run(in), b = graph::Executable(merged).run(in), e = step(in);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "output " << i;
    EXPECT_TRUE(bitwise_equal(b[i], e[i])) << "output " << i;
  }
}

graph::Graph merge_both(const graph::Graph& g) { return graph::merge_scales(graph::merge_sum_squares(g)); }

}  // namespace

TEST(MultiTensorClip, ATracedClipBecomesOneSumOfSquaresAndOneScaleWithTheSameBits) {
  const graph::StepFn step = [](const std::vector<Tensor>& in) { return clip(in); };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, tensors(1)).graph);
  ASSERT_EQ(count(g, "sum_squares"), 4);
  ASSERT_EQ(count(g, "mul"), 4);
  const graph::Graph m = merge_both(g);
  EXPECT_EQ(count(m, "sum_squares"), 0);
  EXPECT_EQ(count(m, "sum_squares_many"), 1);
  EXPECT_EQ(count(m, "mul"), 0);
  EXPECT_EQ(count(m, "scale_many"), 1);
  EXPECT_EQ(count(m, "add"), count(g, "add") - 4);  // the running total's adds
  expect_same_bits(g, m, step);
}

TEST(MultiTensorClip, ATensorReadBetweenTwoScalesKeepsTheScalesItWouldCrossApart) {
  // The first tensor's scaled value is read before the others are scaled: its scale may not move
  // past that read; the other three still merge.
  const graph::StepFn step = [](const std::vector<Tensor>& in) {
    Tensor read;
    std::vector<Tensor> out = clip(in, [&](std::vector<Tensor>& g) { read = mul(g[0], g[0]); });
    out.push_back(read);
    return out;
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, tensors(1)).graph);
  const graph::Graph m = merge_both(g);
  EXPECT_EQ(count(m, "scale_many"), 1);
  EXPECT_EQ(count(m, "mul"), 2);  // the first tensor's scale and the read
  expect_same_bits(g, m, step);
}

TEST(MultiTensorClip, ATensorWrittenBeforeTheLastAddEndsTheChainOfSquares) {
  // x0 is written after its square is taken and before the second add reads the next square:
  // the merged call (at the last add) would read the new x0, so no chain of two forms.
  const graph::StepFn step = [](const std::vector<Tensor>& in) {
    Tensor x0 = clone(in[0]), x1 = clone(in[1]);
    Tensor total = add(full({}, 0.0, DType::f64), sum_squares(x0));
    mul_(x0, 2.0);
    total = add(total, sum_squares(x1));
    return std::vector<Tensor>{total, x0};
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, tensors(1)).graph);
  const graph::Graph m = graph::merge_sum_squares(g);
  EXPECT_EQ(count(m, "sum_squares_many"), 0);
  EXPECT_EQ(m.nodes.size(), g.nodes.size());
  expect_same_bits(g, m, step);
}

TEST(MultiTensorClip, ScalesOfTwoDtypesMergePerDtype) {
  const graph::StepFn step = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> g = {clone(in[0]), to_dtype(in[1], DType::f64), clone(in[2]), to_dtype(in[3], DType::f64)};
    const Tensor factor = full({1}, 0.3, DType::f64);
    mul_all_(g, factor);
    return g;
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(step, tensors(1)).graph);
  const graph::Graph m = graph::merge_scales(g);
  EXPECT_EQ(count(m, "scale_many"), 2);
  EXPECT_EQ(count(m, "mul"), 0);
  expect_same_bits(g, m, step);
}
