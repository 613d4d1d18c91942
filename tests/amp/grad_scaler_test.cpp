// GradScaler: unscaling (kernel amp_unscale), an injected inf skipping the step with parameters
// and optimizer state unchanged and the scale halved, growth after growth_interval clean steps,
// and its checkpoint state.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "multi_tensor_check.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"

namespace trireme {
namespace {

using amp::GradScaler;

std::vector<double> values(const Tensor& t) { return contiguous(to_dtype(t.detach(), DType::f64)).to_vector<double>(); }

TEST(GradScaler, UnscaleDividesEveryDtypeAndFlagsNothingWhenFinite) {
  GradScaler scaler({.init_scale = 1024.0});
  std::vector<Tensor> grads;
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    grads.push_back(to_dtype(from_vector<double>({1024.0, -2048.0, 512.0, 0.0}, {4}), dt));
  }
  // A non-contiguous gradient (a transposed view) is unscaled in place too.
  Tensor base = from_vector<float>({1024, 2048, 3072, 4096, 5120, 6144}, {2, 3});
  Tensor strided = transpose(base, 0, 1);
  grads.push_back(strided);
  scaler.unscale(grads);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(values(grads[i]), (std::vector<double>{1, -2, 0.5, 0})) << i;
  EXPECT_EQ(values(base), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(scaler.found_inf().to_vector<float>()[0], 0.0f);
  EXPECT_TRUE(scaler.update());
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.scale_value(), 1024.0);
}

// Eagerly the contiguous gradients of each dtype take one amp_unscale_many call, with the bits and
// the flag of amp_unscale per gradient.
TEST(GradScaler, UnscaleIsOneCallPerDtypeWithTheBitsOfOnePerGradient) {
  testing::expect_unscale_matches_amp_unscale_per_tensor(Device::cpu());
}

TEST(GradScaler, InfSkipsTheStepAndHalvesTheScale) {
  Tensor p = from_vector<float>({0.5f, -0.25f, 1.0f}, {3}).set_requires_grad(true);
  optim::AdamW opt({{"p", p}}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 256.0, .growth_interval = 100});
  // One clean step first, so that the optimizer has state to compare.
  p.set_grad(from_vector<float>({256.0f, 512.0f, -256.0f}, {3}));
  scaler.unscale({p.grad()});
  ASSERT_TRUE(scaler.update());
  opt.step();
  opt.zero_grad();
  const auto params_before = values(p);
  const auto state_before = opt.state_dict();
  // Then a step whose gradient overflowed.
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const double scale_before = scaler.scale_value();
    p.set_grad(from_vector<float>({1.0f, bad, 2.0f}, {3}));
    scaler.unscale({p.grad()});
    EXPECT_EQ(scaler.found_inf().to_vector<float>()[0], 1.0f);
    if (scaler.update()) opt.step();
    opt.zero_grad();
    EXPECT_EQ(scaler.scale_value(), scale_before * 0.5);
    EXPECT_EQ(scaler.growth_tracker(), 0);
    EXPECT_EQ(values(p), params_before) << "a skipped step leaves the parameters alone";
    const auto state_after = opt.state_dict();
    ASSERT_EQ(state_after.size(), state_before.size());
    for (size_t i = 0; i < state_after.size(); ++i) {
      EXPECT_EQ(state_after[i].first, state_before[i].first);
      EXPECT_EQ(values(state_after[i].second), values(state_before[i].second)) << state_after[i].first;
    }
  }
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.found_inf().to_vector<float>()[0], 0.0f) << "update() resets the flag";
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto clean_step = [&] {
    Tensor g = full({2}, 1.0);
    scaler.unscale({g});
    return scaler.update();
  };
  EXPECT_TRUE(clean_step());
  EXPECT_TRUE(clean_step());
  EXPECT_EQ(scaler.scale_value(), 8.0);
  EXPECT_TRUE(clean_step());
  EXPECT_EQ(scaler.scale_value(), 16.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // An overflow restarts the count.
  Tensor g = full({2}, std::numeric_limits<double>::infinity());
  scaler.unscale({g});
  EXPECT_FALSE(scaler.update());
  EXPECT_EQ(scaler.scale_value(), 8.0);
  EXPECT_TRUE(clean_step());
  EXPECT_TRUE(clean_step());
  EXPECT_EQ(scaler.scale_value(), 8.0);
  EXPECT_TRUE(clean_step());
  EXPECT_EQ(scaler.scale_value(), 16.0);
}

TEST(GradScaler, StateRoundTripsAndBadOptionsAreErrors) {
  GradScaler a({.init_scale = 64.0, .growth_interval = 5});
  Tensor g = full({1}, 1.0);
  a.unscale({g});
  a.update();
  Tensor bad = full({1}, std::numeric_limits<double>::infinity());
  a.unscale({bad});
  a.update();
  a.unscale({g});
  a.update();
  GradScaler b({.init_scale = 1.0, .growth_interval = 5});
  auto sd = a.state_dict();
  b.load_state_dict({sd.begin(), sd.end()});
  EXPECT_EQ(b.scale_value(), a.scale_value());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_THROW(b.load_state_dict({}), Error);
  EXPECT_THROW(GradScaler({.init_scale = 0.0}), Error);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.5}), Error);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), Error);
}

}  // namespace
}  // namespace trireme
