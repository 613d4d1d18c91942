// The model-split example's core (examples/model_split) on the CPU alone: both halves on cpu,
// checked against the one-device run, so CI covers the program a new user reads first. The
// CUDA version (cuda:0 / cuda:1, f32 and bf16) is tests/cuda/model_split_test.cpp.
#include <gtest/gtest.h>

#include "../../examples/model_split/model_split.h"

namespace trireme {
namespace {

using model_split::ModelConfig;
using model_split::Placement;
using model_split::RunRecord;
using model_split::Schedule;

// The example's defaults (32 layers, d_model 64), fewer steps.
constexpr int kSteps = 2;

void expect_equal_runs(const RunRecord& run, const RunRecord& ref, double tol) {
  ASSERT_EQ(run.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_LE(std::abs(run.losses[s] - ref.losses[s]), tol * std::abs(ref.losses[s])) << "loss of step " << s;
  }
  EXPECT_LE(model_split::max_rel_diff(run.output, ref.output), tol) << "output";
  ASSERT_EQ(run.grads.size(), ref.grads.size());
  ASSERT_EQ(run.grads.size(), 32u * 12u);  // 12 parameters per decoder layer
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_EQ(run.grads[i].first, ref.grads[i].first);
    EXPECT_LE(model_split::max_rel_diff(run.grads[i].second, ref.grads[i].second), tol) << ref.grads[i].first;
  }
}

TEST(ModelSplit, CpuSplitEqualsOneDeviceExactly) {
  ModelConfig c;
  RunRecord ref = model_split::train(c, {Device::cpu(), Device::cpu(), 32}, {}, kSteps);  // split after all: one device
  RunRecord split = model_split::train(c, {Device::cpu(), Device::cpu(), 16}, {}, kSteps);
  expect_equal_runs(split, ref, 0.0);  // the same kernels in the same order: bit for bit
  EXPECT_GT(ref.losses[0], ref.losses[1]) << "AdamW should lower the loss";
  EXPECT_THROW(model_split::make_batch(ModelConfig{.seq = 1}, 0, false), Error) << "the task needs two positions";
}

TEST(ModelSplit, MicroBatchesMatchWithinTheDtypeTolerance) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    ModelConfig c{.dtype = dt};
    RunRecord ref = model_split::train(c, {Device::cpu(), Device::cpu(), 32}, {}, kSteps);
    RunRecord split = model_split::train(c, {Device::cpu(), Device::cpu(), 16}, {.micro_batches = 2}, kSteps);
    expect_equal_runs(split, ref, model_split::tolerance_for(dt));
  }
}

// The example must train, not only agree: a split that equals one device while the loss climbs
// reads as broken. Over the example's 6 steps the loss falls, at its defaults (f32) and at a 4x
// wider model in bf16 (the per-batch loss is noisy, so first against last).
TEST(ModelSplit, TheLossGoesDown) {
  RunRecord defaults = model_split::train(ModelConfig{}, {Device::cpu(), Device::cpu(), 16}, {}, 6);
  EXPECT_LT(defaults.losses.back(), 0.8 * defaults.losses.front());
  ModelConfig wide{.layers = 4, .d_model = 256, .seq = 8, .batch = 4, .dtype = DType::bf16};
  RunRecord r = model_split::train(wide, {Device::cpu(), Device::cpu(), 2}, {}, 6);
  EXPECT_LT(r.losses.back(), r.losses.front());
  for (double l : r.losses) EXPECT_LT(l, 1.2 * r.losses.front()) << "no step climbs far above the first";
}

TEST(ModelSplit, TheDefaultLearningRateShrinksWithWidth) {
  EXPECT_DOUBLE_EQ(model_split::default_lr(ModelConfig{}), 1e-3);
  EXPECT_DOUBLE_EQ(model_split::default_lr(ModelConfig{.d_model = 1024}), 1e-3 / 16);
  EXPECT_DOUBLE_EQ(model_split::warmup_lr(1.0, 0, 2), 1.0 / 3);
  EXPECT_DOUBLE_EQ(model_split::warmup_lr(1.0, 2, 2), 1.0);
}

TEST(ModelSplit, TheInitDoesNotDependOnThePlacement) {
  ModelConfig c{.layers = 4};
  Placement a{Device::cpu(), Device::cpu(), 1}, b{Device::cpu(), Device::cpu(), 3};
  auto ma = model_split::build_model(c, a), mb = model_split::build_model(c, b);
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(model_split::max_rel_diff(pa[i].second, pb[i].second), 0.0) << pa[i].first;
}

TEST(ModelSplit, BadArgumentsAreClearErrors) {
  ModelConfig c{.layers = 4};
  Placement too_far{Device::cpu(), Device::cpu(), 5};
  EXPECT_THROW(model_split::build_model(c, too_far), Error);
  Placement p{Device::cpu(), Device::cpu(), 2};
  auto model = model_split::build_model(c, p);
  EXPECT_THROW(model_split::SplitRunner(*model, p, {.micro_batches = 0}), Error);
  EXPECT_THROW(model_split::SplitRunner(*model, p, {.non_blocking = true}), Error);  // needs CUDA devices
  model_split::SplitRunner three(*model, p, {.micro_batches = 3});
  EXPECT_THROW(three.forward_backward(model_split::make_batch(c, 0, false)), Error);  // batch 4 into 3
}

}  // namespace
}  // namespace trireme
