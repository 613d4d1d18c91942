// train.mode = "static" with SGD: its learning rate is an argument the graph recomputes before
// every replay (ops/step_scalar.h), so a schedule that moves it trains as eager does, bit for bit
// (losses, gradient norms, parameters, momentum buffers), with dropout on.
#include <gtest/gtest.h>

#include "static_one_process_compare.h"

TEST(StaticSgd, TwentyStepsWithMomentumAndAMovingLearningRateEqualEager) {
  // Warmup then cosine: the learning rate differs at every step the graph replays.
  trireme::testing::expect_static_equals_eager(
      "sgd", {"optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9", "optim.weight_decay=0.01", "optim.grad_clip=0.5",
              "schedule.kind=cosine", "schedule.warmup_steps=5", "train.eval_interval=5"});
}
