// Checkpointed regions: the same gradients as the plain graph (inputs and the parameters used
// inside), nothing of the region recorded during the forward, the replay in the first run's
// autocast state, and a region that returns its own input refused.
#include <gtest/gtest.h>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/autograd/engine.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using autograd::TensorList;

namespace {

Tensor leaf(Shape shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = to_dtype(randn(shape, gen), DType::f64);
  t.set_requires_grad(true);
  return t;
}

// Two layers with a GELU and a tanh between, reading a second input that needs no gradient.
TensorList region(const Tensor& w1, const Tensor& w2, const TensorList& in) {
  Tensor h = gelu(linear(in[0], w1)) + in[1];
  return {tanh(linear(h, w2)), sum(h)};
}

}  // namespace

TEST(Checkpoint, GradientsEqualThePlainGraph) {
  Tensor w1 = leaf({6, 4}, 1), w2 = leaf({3, 6}, 2), x = leaf({5, 4}, 3);
  Tensor bias = to_dtype(from_vector<double>({0.1, -0.2, 0.3, 0.0, 0.5, -0.1}, {6}), DType::f64);
  auto loss_of = [&](const TensorList& out) { return sum(out[0] * out[0]) + out[1] * 0.5; };

  loss_of(region(w1, w2, {x, bias})).backward();
  const std::vector<double> gx = x.grad().to_vector<double>(), g1 = w1.grad().to_vector<double>(),
                            g2 = w2.grad().to_vector<double>();
  x.set_grad(Tensor()), w1.set_grad(Tensor()), w2.set_grad(Tensor());

  int runs = 0;
  TensorList out = autograd::checkpoint(
      [&](const TensorList& in) {
        ++runs;
        return region(w1, w2, in);
      },
      {x, bias});
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(out[0].requires_grad());
  loss_of(out).backward();
  EXPECT_EQ(runs, 2);  // the replay
  EXPECT_EQ(x.grad().to_vector<double>(), gx);
  EXPECT_EQ(w1.grad().to_vector<double>(), g1);
  EXPECT_EQ(w2.grad().to_vector<double>(), g2);
}

TEST(Checkpoint, RunsPlainlyWithoutGradMode) {
  Tensor w1 = leaf({6, 4}, 1), w2 = leaf({3, 6}, 2), x = leaf({5, 4}, 3);
  NoGradGuard no_grad;
  int runs = 0;
  TensorList out = autograd::checkpoint(
      [&](const TensorList& in) {
        ++runs;
        return region(w1, w2, {in[0], zeros({6}, DType::f64)});
      },
      {x});
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(out[0].requires_grad());
}

TEST(Checkpoint, TheReplayRunsInTheFirstRunsAutocastState) {
  Tensor x = leaf({2, 4}, 6);
  std::vector<std::optional<DType>> seen;
  TensorList out;
  {
    autograd::AutocastModeGuard bf16(DeviceType::cpu, {.enabled = true, .dtype = DType::bf16});
    out = autograd::checkpoint(
        [&](const TensorList& in) {
          seen.push_back(autograd::autocast_dtype(DeviceType::cpu));
          return TensorList{in[0] * 2.0};
        },
        {x});
  }
  sum(out[0]).backward();  // outside autocast
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::optional<DType>(DType::bf16));
  EXPECT_EQ(seen[1], std::optional<DType>(DType::bf16));
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(8, 2.0));
}

TEST(Checkpoint, ARegionThatReturnsItsInputIsRefused) {
  Tensor x = leaf({3}, 7);
  EXPECT_THROW(autograd::checkpoint([](const TensorList& in) { return in; }, {x}), Error);
}
