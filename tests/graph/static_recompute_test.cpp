// train.mode = "static" with recomputation: a checkpointed block re-runs its forward inside the
// traced backward (more kernel calls, its dropout masks redrawn from the streams the first run
// bound), and selective recomputation re-runs norms and activations when their saved outputs
// are unpacked; both train as eager does, bit for bit, with dropout on and two micro-batches.
#include <gtest/gtest.h>

#include "static_one_process_compare.h"

namespace {

void expect_static_equals_eager(const std::string& recompute) {
  trireme::testing::expect_static_equals_eager("recompute_" + recompute,
                                               {"memory.recompute=" + recompute, "parallel.micro_batches=2",
                                                "optim.grad_clip=0.5", "train.eval_interval=5"});
}

}  // namespace

TEST(StaticRecompute, FullRecomputationEqualsEagerWithDropout) { expect_static_equals_eager("full"); }

TEST(StaticRecompute, SelectiveRecomputationEqualsEagerWithDropout) { expect_static_equals_eager("selective"); }
