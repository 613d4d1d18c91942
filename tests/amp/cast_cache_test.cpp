// Autocast's cast cache (Note [autocast cast cache] in autograd/autocast_mode.h): inside a scope,
// micro-batches whose forwards run before their backwards share one cast of each weight, and get
// the gradients, bit for bit, that casts of their own give; casts under no-grad and inside a
// backward (a recomputed region's replay) are not kept; a weight changed in place is cast again.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "counting_tape.h"
#include "graph/graph_test_util.h"
#include "trireme/amp/autocast.h"
#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"

namespace trireme {
namespace {

using amp::AutocastGuard;

Tensor leaf(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen).detach().set_requires_grad(true);
}

struct MicroBatches {
  std::vector<Tensor> outputs;
  Tensor w_grad, b_grad;
  int casts = 0;  // copy kernels run by the forwards
};

// Two micro-batches through linear(x, w, b) under bf16 autocast, both forwards before either
// backward (as a pipeline's warm-up runs them), optionally inside a CastCache of {w, b}, and
// optionally each forward a checkpointed region (recomputed in its backward).
MicroBatches run(bool cached, bool recomputed) {
  Tensor w = leaf({6, 8}, 2), b = leaf({6}, 3);
  const std::vector<Tensor> xs = {leaf({4, 8}, 10), leaf({4, 8}, 11)};
  MicroBatches r;
  std::optional<autograd::CastCache> cache;
  if (cached) cache.emplace(std::vector<Tensor>{w, b});
  {
    testing::CountingTape tape;
    AutocastGuard autocast(DeviceType::cpu, DType::bf16);
    for (const Tensor& x : xs) {
      if (recomputed) {
        r.outputs.push_back(autograd::checkpoint(
            [](const autograd::TensorList& in) { return autograd::TensorList{linear(in[0], in[1], in[2])}; }, {x, w, b})[0]);
      } else {
        r.outputs.push_back(linear(x, w, b));
      }
    }
    r.casts = tape.calls["copy"];
  }
  for (const Tensor& y : r.outputs) sum(y).backward();
  r.w_grad = w.grad();
  r.b_grad = b.grad();
  return r;
}

TEST(CastCache, MicroBatchesShareOneCastOfEachWeightAndGetTheSameGradients) {
  const MicroBatches own = run(false, false), shared = run(true, false);
  // Own casts: x, w, b per micro-batch. Shared: each x, and w and b once.
  EXPECT_EQ(own.casts, 6);
  EXPECT_EQ(shared.casts, 4);
  for (size_t i = 0; i < own.outputs.size(); ++i) {
    EXPECT_TRUE(testing::bitwise_equal(own.outputs[i], shared.outputs[i])) << "micro-batch " << i;
  }
  ASSERT_TRUE(shared.w_grad.defined());
  EXPECT_EQ(shared.w_grad.dtype(), DType::f32);
  EXPECT_TRUE(testing::bitwise_equal(own.w_grad, shared.w_grad));
  EXPECT_TRUE(testing::bitwise_equal(own.b_grad, shared.b_grad));
}

TEST(CastCache, ARecomputedRegionKeepsNoCast) {
  // The regions' first runs are under no-grad and their replays inside the backward: nothing is
  // kept, so the forwards cast every weight for every micro-batch, as without the cache.
  const MicroBatches own = run(false, true), shared = run(true, true);
  EXPECT_EQ(shared.casts, own.casts);
  EXPECT_EQ(shared.casts, 6);
  EXPECT_TRUE(testing::bitwise_equal(own.w_grad, shared.w_grad));
  EXPECT_TRUE(testing::bitwise_equal(own.b_grad, shared.b_grad));
}

TEST(CastCache, KeepsNothingUnderNoGradOrWithAutocastSwitchedOff) {
  Tensor w = leaf({6, 8}, 2), x = leaf({4, 8}, 10);
  autograd::CastCache cache({w});
  AutocastGuard autocast(DeviceType::cpu, DType::bf16);
  {
    NoGradGuard no_grad;
    (void)linear(x, w, Tensor());
    EXPECT_FALSE(cache.keeps(w));
    EXPECT_FALSE(cache.find(w, DType::bf16).defined());
  }
  {
    autograd::AutocastOffGuard off;  // as the backward engine runs
    EXPECT_EQ(autograd::active_cast_cache(), nullptr);
    AutocastGuard replay(DeviceType::cpu, DType::bf16);  // a replay turns autocast back on
    (void)linear(x, w, Tensor());
    EXPECT_FALSE(cache.find(w, DType::bf16).defined());
  }
  EXPECT_EQ(autograd::active_cast_cache(), &cache);
  (void)linear(x, w, Tensor());
  EXPECT_TRUE(cache.find(w, DType::bf16).defined());
  EXPECT_FALSE(cache.find(x, DType::bf16).defined()) << "only the scope's tensors are kept";
}

TEST(CastCache, AWeightChangedInPlaceIsCastAgain) {
  Tensor w = leaf({6, 8}, 2), x = leaf({4, 8}, 10);
  autograd::CastCache cache({w});
  AutocastGuard autocast(DeviceType::cpu, DType::bf16);
  const Tensor before = linear(x, w, Tensor());
  {
    NoGradGuard no_grad;
    mul_(w, 2.0);
  }
  testing::CountingTape tape;
  const Tensor after = linear(x, w, Tensor());
  EXPECT_EQ(tape.calls["copy"], 2) << "x and the changed w";
  EXPECT_FALSE(testing::bitwise_equal(before, after));
}

}  // namespace
}  // namespace trireme
