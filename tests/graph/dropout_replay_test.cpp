// Dropout in a replayed graph draws a fresh mask every step, the mask eager draws for that step.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/graph/static_function.h"
#include "trireme/nn/dropout.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

TEST(DropoutReplay, MasksDifferBetweenReplaysAndEqualEagers) {
  nn::Dropout drop(0.5);
  Tensor w = random_tensor({64}, 5).set_requires_grad(true);
  // Forward and backward: the backward's mask must follow the forward's.
  auto body = [&](const Tensor& x) -> std::vector<Tensor> {
    Tensor y = drop.forward(mul(x, w));
    sum(y).backward();
    std::vector<Tensor> out = {y.detach(), w.grad()};
    w.set_grad(Tensor());
    return out;
  };
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return body(in[0]); });
  Tensor x = random_tensor({64}, 1);
  std::vector<Tensor> previous;
  for (uint64_t step = 0; step < 4; ++step) {
    drop.set_rng(9, step);
    std::vector<Tensor> replayed = f({x});
    drop.set_rng(9, step);
    std::vector<Tensor> eager = body(x);
    ASSERT_TRUE(bitwise_equal(replayed[0], eager[0])) << "step " << step;
    ASSERT_TRUE(bitwise_equal(replayed[1], eager[1])) << "step " << step;
    if (!previous.empty()) {
      EXPECT_FALSE(bitwise_equal(replayed[0], previous[0])) << "step " << step;
    }
    previous = replayed;
  }
  EXPECT_EQ(f.traces(), 1);
  EXPECT_EQ(f.replays(), 3);
}
