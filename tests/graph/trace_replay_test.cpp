// A traced function replays to the same bits as running it eagerly on the same inputs: single
// ops, and a small MLP's forward and backward.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/static_function.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

// Traces fn on (a, b), then replays on fresh inputs and compares with fn run eagerly on them.
void expect_replay_equals_eager(const graph::StepFn& fn, const Shape& sa, const Shape& sb, const char* what) {
  graph::TraceResult r = graph::trace(fn, {random_tensor(sa, 1), random_tensor(sb, 2)});
  ASSERT_FALSE(r.graph.nodes.empty()) << what;
  graph::Executable exe(r.graph);
  for (uint64_t seed = 10; seed < 13; ++seed) {
    Tensor a = random_tensor(sa, seed), b = random_tensor(sb, seed + 100);
    std::vector<Tensor> eager = fn({a, b});
    std::vector<Tensor> replayed = exe.run({a, b});
    ASSERT_EQ(eager.size(), replayed.size()) << what;
    for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(bitwise_equal(eager[i], replayed[i])) << what << " output " << i;
  }
}

}  // namespace

TEST(TraceReplay, SingleOpsEqualEager) {
  NoGradGuard no_grad;
  using In = const std::vector<Tensor>&;
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {add(in[0], in[1])}; }, {4, 5}, {5}, "add");
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {mul(in[0], in[1])}; }, {4, 5}, {4, 5}, "mul");
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {exp(in[0])}; }, {7}, {1}, "exp");
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {matmul(in[0], in[1])}; }, {3, 8}, {8, 5}, "matmul");
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {softmax(in[0])}; }, {3, 9}, {1}, "softmax");
  expect_replay_equals_eager([](In in) -> std::vector<Tensor> { return {sum(in[0]), sum(in[1], {0})}; }, {6, 2}, {4, 3},
                             "sum");
}

TEST(TraceReplay, MlpForwardAndBackwardEqualEager) {
  Tensor w1 = random_tensor({6, 16}, 3).set_requires_grad(true);
  Tensor b1 = random_tensor({16}, 4).set_requires_grad(true);
  Tensor w2 = random_tensor({16, 1}, 5).set_requires_grad(true);
  // The gradients are outputs, and released inside the step as an optimizer's zero_grad does.
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor h = relu(add(matmul(in[0], w1), b1));
    Tensor loss = sum(mul(matmul(h, w2), in[1]));
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), w1.grad(), b1.grad(), w2.grad()};
    for (const Tensor* p : {&w1, &b1, &w2}) p->set_grad(Tensor());
    return out;
  };
  expect_replay_equals_eager(step, {5, 6}, {5, 1}, "mlp");
}

TEST(TraceReplay, ReplayBuildsNoAutogradGraphAndAllocatesOnlyOutputs) {
  Tensor w = random_tensor({4, 4}, 3).set_requires_grad(true);
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss = sum(exp(matmul(in[0], w)));
    loss.backward();
    std::vector<Tensor> out = {loss.detach(), w.grad()};
    w.set_grad(Tensor());
    return out;
  };
  graph::Executable exe(graph::trace(step, {random_tensor({2, 4}, 1)}).graph);
  std::vector<Tensor> out = exe.run({random_tensor({2, 4}, 2)});
  EXPECT_FALSE(out[0].grad_fn());
  EXPECT_FALSE(w.grad().defined());  // the replay touched no autograd state
  EXPECT_GT(exe.plan().planned_buffers, 0);
}
