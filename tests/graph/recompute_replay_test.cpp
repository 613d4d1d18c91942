// A checkpointed region replayed inside a traced backward (nn::checkpointed) redraws its first
// run's dropout masks from the streams that run bound: outside a GlobalRowScope, where each
// forward advances the layer's counter, a replay of the graph advances it once per step, as eager
// does, not once more for the recomputation.
#include <gtest/gtest.h>

#include <memory>

#include "graph_test_util.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/static_function.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/linalg.h"
#include "trireme/nn/checkpoint.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

// One step: dropout(x * w) as a checkpointed region, then the backward (which replays it).
std::vector<Tensor> step(const std::shared_ptr<nn::Dropout>& drop, Tensor& w, const Tensor& x) {
  Tensor y = nn::checkpointed(drop, mul(x, w), [drop](const Tensor& in) { return drop->forward(in); });
  sum(mul(y, y)).backward();
  std::vector<Tensor> out = {y.detach(), w.grad()};
  w.set_grad(Tensor());
  return out;
}

}  // namespace

TEST(RecomputeReplay, CheckpointedDropoutAdvancesOncePerStepAndEqualsEager) {
  // Two layers of the same name and seed: one runs eagerly, the other traced and replayed.
  auto eager_drop = std::make_shared<nn::Dropout>(0.5), static_drop = std::make_shared<nn::Dropout>(0.5);
  eager_drop->set_rng(9, 0);
  static_drop->set_rng(9, 0);
  Tensor we = random_tensor({64}, 5).set_requires_grad(true), ws = random_tensor({64}, 5).set_requires_grad(true);
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return step(static_drop, ws, in[0]); });
  const Tensor x = random_tensor({64}, 1);
  for (int i = 0; i < 5; ++i) {
    std::vector<Tensor> replayed = f({x}), eager = step(eager_drop, we, x);
    ASSERT_TRUE(bitwise_equal(replayed[0], eager[0])) << "step " << i;
    ASSERT_TRUE(bitwise_equal(replayed[1], eager[1])) << "step " << i;
  }
  EXPECT_EQ(f.traces(), 1);
  EXPECT_EQ(f.replays(), 4);
}

TEST(RecomputeReplay, CommonSubexpressionsLeaveTheRecomputationAlone) {
  // The replay's calls are the first run's again, on the same inputs: merging them would keep the
  // first run's results until the backward, which is what recomputing avoids.
  Tensor w = random_tensor({16, 16}, 1).set_requires_grad(true);
  graph::StepFn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    auto region = [&](const autograd::TensorList& r) { return autograd::TensorList{tanh(matmul(tanh(matmul(r[0], w)), w))}; };
    sum(autograd::checkpoint(region, {in[0]})[0]).backward();
    std::vector<Tensor> out = {w.grad()};
    w.set_grad(Tensor());
    return out;
  };
  const graph::Graph g = graph::eliminate_dead_code(graph::trace(fn, {random_tensor({8, 16}, 2)}).graph);
  int64_t recomputed = 0;
  for (const graph::Node& n : g.nodes) recomputed += n.recomputed;
  EXPECT_EQ(recomputed, 4);  // both products and both tanh: the backward reads the second tanh's output
  EXPECT_EQ(graph::eliminate_common_subexpressions(g).nodes.size(), g.nodes.size());
  const Tensor x = random_tensor({8, 16}, 3);
  EXPECT_TRUE(bitwise_equal(graph::Executable(graph::eliminate_common_subexpressions(g)).run({x})[0], fn({x})[0]));
}
