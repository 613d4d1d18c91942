// Dead-code and common-subexpression elimination: what they remove, what they must keep.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

TEST(DeadCode, RemovesAnUnusedBranchAndKeepsTheResult) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor unused = mul(log(in[0]), 2.0);  // computed, never returned
    (void)unused;
    return {exp(in[0])};
  };
  Tensor x = random_tensor({8}, 1);
  graph::Graph g = graph::trace(fn, {x}).graph;
  graph::Graph d = graph::eliminate_dead_code(g);
  EXPECT_EQ(g.nodes.size(), 3u);
  ASSERT_EQ(d.nodes.size(), 1u);
  EXPECT_EQ(d.nodes[0].op, "exp");
  Tensor x2 = random_tensor({8}, 2);
  EXPECT_TRUE(bitwise_equal(graph::Executable(d).run({x2})[0], exp(x2)));
}

TEST(DeadCode, KeepsWritesToStateThatOutlivesTheStep) {
  NoGradGuard no_grad;
  Tensor state = zeros({4});
  graph::StepFn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    add_(state, in[0]);  // a side effect only
    return {mul(in[0], 3.0)};
  };
  graph::Graph d = graph::eliminate_dead_code(graph::trace(fn, {ones({4})}).graph);
  EXPECT_EQ(d.nodes.size(), 2u);
}

TEST(CommonSubexpressions, MergesDuplicatePureCalls) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {add(exp(in[0]), exp(in[0]))}; };
  graph::Graph g = graph::trace(fn, {random_tensor({5}, 1)}).graph;
  graph::Graph c = graph::eliminate_common_subexpressions(g);
  EXPECT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(c.nodes.size(), 2u);
  Tensor x = random_tensor({5}, 2);
  EXPECT_TRUE(bitwise_equal(graph::Executable(c).run({x})[0], add(exp(x), exp(x))));
}

TEST(CommonSubexpressions, AViewOfAMergedResultReadsTheKeptOne) {
  NoGradGuard no_grad;
  // The duplicate's result is read through views (as stack reads its operands): they must move
  // to the kept call's buffer, or they would read memory nothing writes.
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor a = exp(in[0]), b = exp(in[0]);
    return {add(unsqueeze(a, 0), unsqueeze(b, 0))};
  };
  graph::Graph c = graph::eliminate_common_subexpressions(graph::trace(fn, {random_tensor({5}, 1)}).graph);
  EXPECT_EQ(c.nodes.size(), 2u);
  Tensor x = random_tensor({5}, 2);
  EXPECT_TRUE(bitwise_equal(graph::Executable(c).run({x})[0], fn({x})[0]));
}

TEST(CommonSubexpressions, KeepsInPlaceUpdatesAndReadsOfChangedValues) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor c = clone(in[0]);
    mul_(c, 2.0);  // two identical in-place calls: both must run
    mul_(c, 2.0);
    Tensor a = exp(c);
    mul_(c, 2.0);
    Tensor b = exp(c);  // the same call on c after it changed: not a's duplicate
    return {c, add(a, b)};
  };
  graph::Graph g = graph::trace(fn, {random_tensor({5}, 1)}).graph;
  graph::Graph c = graph::eliminate_common_subexpressions(g);
  EXPECT_EQ(c.nodes.size(), g.nodes.size());
  Tensor x = random_tensor({5}, 2);
  std::vector<Tensor> eager = fn({x}), replayed = graph::Executable(c).run({x});
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(bitwise_equal(eager[i], replayed[i])) << i;
}
