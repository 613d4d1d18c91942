// Checkpointed regions: the same gradients as the plain graph (inputs and the parameters used
// inside), nothing of the region recorded during the forward, the replay in the first run's
// autocast state, and a region that returns its own input refused.
#include <gtest/gtest.h>

#include "counting_tape.h"

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/autograd/engine.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/kernels/deferred_kernels.h"
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

namespace {

// x + (relu(x w1) w2): the second product only flows into the output, so no backward reads it.
TensorList residual_mlp(const Tensor& w1, const Tensor& w2, const TensorList& in) {
  return {add(matmul(relu(matmul(in[0], w1)), w2), in[0])};
}

}  // namespace

TEST(Checkpoint, TheReplayComputesOnlyWhatTheBackwardReads) {
  Tensor w1 = leaf({4, 6}, 1), w2 = leaf({6, 4}, 2), x = leaf({5, 4}, 3);
  auto loss_of = [](const Tensor& y) { return sum(y * y); };
  std::map<std::string, int> plain_calls;
  {
    trireme::testing::CountingTape tape;
    loss_of(residual_mlp(w1, w2, {x})[0]).backward();
    plain_calls = tape.calls;
  }
  const Tensor gx = x.grad(), g1 = w1.grad(), g2 = w2.grad();
  x.set_grad(Tensor()), w1.set_grad(Tensor()), w2.set_grad(Tensor());
  std::map<std::string, int> checkpointed_calls;
  {
    trireme::testing::CountingTape tape;
    Tensor y = autograd::checkpoint([&](const TensorList& in) { return residual_mlp(w1, w2, in); }, {x})[0];
    loss_of(y).backward();
    checkpointed_calls = tape.calls;
  }
  // The replay runs the first product and the relu again, not the second product nor the add.
  EXPECT_EQ(checkpointed_calls["matmul"], plain_calls["matmul"] + 1);
  EXPECT_EQ(checkpointed_calls["relu"], plain_calls["relu"] + 1);
  EXPECT_EQ(checkpointed_calls["add"], plain_calls["add"]);
  EXPECT_EQ(x.grad().to_vector<double>(), gx.to_vector<double>());
  EXPECT_EQ(w1.grad().to_vector<double>(), g1.to_vector<double>());
  EXPECT_EQ(w2.grad().to_vector<double>(), g2.to_vector<double>());
}

TEST(Checkpoint, HostCodeInsideTheReplayReadsComputedValues) {
  // The region reads a value it computed on the host: the kept calls run before it does.
  Tensor w = leaf({4, 4}, 1), x = leaf({3, 4}, 2);
  auto region = [&](const TensorList& in) {
    Tensor h = tanh(matmul(in[0], w));
    return TensorList{mul(h, sum(h).item())};
  };
  sum(region({x})[0]).backward();
  const std::vector<double> gx = x.grad().to_vector<double>(), gw = w.grad().to_vector<double>();
  x.set_grad(Tensor()), w.set_grad(Tensor());
  sum(autograd::checkpoint(region, {x})[0]).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), gx);
  EXPECT_EQ(w.grad().to_vector<double>(), gw);
}

TEST(DeferredKernels, RunsOnlyCallsWhoseResultsSomethingHolds) {
  NoGradGuard no_grad;
  const Tensor a = leaf({8}, 1).detach(), b = leaf({8}, 2).detach();
  Tensor held;
  int64_t dropped = 0;
  {
    kernels::DeferredKernels deferred;
    held = add(a, b);  // held outside the kept calls: runs
    std::vector<Tensor> unwanted = {mul(add(a, a), held)};  // only the caller's: neither call runs
    dropped = deferred.run_observed(unwanted);
  }
  EXPECT_EQ(dropped, 2);
  EXPECT_EQ(held.to_vector<double>(), add(a, b).to_vector<double>());
}

TEST(DeferredKernels, AHostReadRunsWhatIsKeptFirst) {
  NoGradGuard no_grad;
  const Tensor a = leaf({8}, 1).detach(), b = leaf({8}, 2).detach();
  int64_t dropped = 0;
  {
    kernels::DeferredKernels deferred;
    Tensor unused = mul(add(a, a), b);
    Tensor read = exp(add(a, b));
    EXPECT_EQ(read.to_vector<double>(), exp(add(a, b)).to_vector<double>());  // runs the four calls above
    std::vector<Tensor> unwanted = {std::move(unused), mul(read, 3.0)};
    dropped = deferred.run_observed(unwanted);
  }
  EXPECT_EQ(dropped, 1);  // only the last mul was still kept
}

TEST(DeferredKernels, AnInnerScopeHandsItsCallsToTheOuterOne) {
  NoGradGuard no_grad;
  const Tensor a = leaf({8}, 1).detach(), b = leaf({8}, 2).detach();
  trireme::testing::CountingTape tape;
  Tensor held;
  {
    kernels::DeferredKernels outer;
    {
      kernels::DeferredKernels inner;
      held = add(a, b);
      EXPECT_EQ(inner.run_observed({}), 0);
    }
    EXPECT_EQ(tape.calls["add"], 0);  // kept by the outer scope
    EXPECT_EQ(outer.run_observed({}), 0);
  }
  EXPECT_EQ(tape.calls["add"], 1);  // run once
  EXPECT_EQ(held.to_vector<double>(), add(a, b).to_vector<double>());
}
