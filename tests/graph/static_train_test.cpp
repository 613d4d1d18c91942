// train.mode = "static": the trainer traces its step and replays it, and trains the model eager
// trains, bit for bit (losses, gradient norms, parameters and optimizer state), with dropout on;
// evaluation runs eagerly between replays; the metrics count the traced graphs; what static mode
// cannot run yet is refused by key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "expect_error.h"
#include "graph_test_util.h"
#include "static_one_process_compare.h"
#include "tiny_trainer_config.h"
#include "trireme/graph/trace.h"
#include "trireme/io/config.h"
#include "trireme/io/safetensors.h"
#include "trireme/kernels/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/train/metrics.h"
#include "trireme/train/parallel_runner.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

TEST(StaticTrain, TwentyStepsEqualEagerBitForBitWithDropout) {
  // Gradient clipping that acts (a small max norm), a schedule that moves the learning rate,
  // evaluation every 5 steps between replays.
  const auto metrics = trireme::testing::expect_static_equals_eager("train", {"optim.grad_clip=0.5", "train.eval_interval=5"});
  bool clipped = false;
  for (const auto& m : metrics) clipped = clipped || m["grad_norm"].get<double>() > 0.5;
  EXPECT_TRUE(clipped) << "the test should clip some steps";
}

// A train.mode other than the two is refused, naming the key.
TEST(StaticTrain, AnUnknownModeIsRefusedByKey) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_refused");
  try {
    trireme::testing::tiny_trainer_config(d, 2, 0.0, {"train.mode=lazy"});
    ADD_FAILURE() << "accepted: train.mode=lazy";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.mode"), std::string::npos) << e.what();
  }
}

TEST(StaticTrain, MicroBatchesUnderBf16AutocastEqualEager) {
  const std::string e = trireme::testing::fresh_run_dir("trireme_static_mb_eager");
  const std::string s = trireme::testing::fresh_run_dir("trireme_static_mb_static");
  const std::vector<std::string> common = {"parallel.micro_batches=2", "train.precision=bf16", "optim.grad_clip=0.5"};
  std::vector<std::string> static_set = common;
  static_set.push_back("train.mode=static");
  train::TrainSummary eager =
      train::Trainer(trireme::testing::tiny_trainer_config(e, 10, 0.1, common), {.quiet = true}).run();
  train::TrainSummary stat =
      train::Trainer(trireme::testing::tiny_trainer_config(s, 10, 0.1, static_set), {.quiet = true}).run();
  ASSERT_EQ(stat.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(stat.losses[i], eager.losses[i]) << "step " << i + 1;
  EXPECT_EQ(stat.final_val_loss, eager.final_val_loss);
  fs::remove_all(e);
  fs::remove_all(s);
}

// The casts of f32 parameters to bf16 in one process's traced step under autocast: one per use of
// a weight in a micro-batch, whatever the number of micro-batches (Note [autocast cast cache]).
static int64_t weight_casts_in_a_step(int64_t micro_batches) {
  const io::TrainConfig tc =
      trireme::testing::tiny_trainer_config(
          trireme::testing::fresh_run_dir("trireme_static_casts"), 10, 0.0,
          {"train.mode=static", "train.precision=bf16", "parallel.micro_batches=" + std::to_string(micro_batches)})
          .resolve();
  auto runner = train::make_step_runner(tc, 64, train::ParallelJob::single(tc.parallel, Device::cpu()));
  runner->set_lr(tc.optim.lr);
  const Shape shape{tc.train.batch_size, tc.model.block_size};
  const io::Batch batch{.inputs = zeros(shape, DType::i64), .targets = zeros(shape, DType::i64)};
  const graph::Graph g = runner->trace_step(batch).graph;
  int64_t casts = 0;
  for (const graph::Node& n : g.nodes) {
    if (n.kernel_type != std::type_index(typeid(CopyKernel)) || n.dtype != DType::bf16 || n.args.empty()) continue;
    const graph::Value& from = g.values[size_t(n.args[0])];
    if (from.dtype == DType::f32 && g.buffers[size_t(from.buffer)].kind == graph::BufferKind::captured) ++casts;
  }
  return casts;
}

TEST(StaticTrain, OneProcessMicroBatchesCastEachWeightOnceAStep) {
  const int64_t one = weight_casts_in_a_step(1);
  EXPECT_GT(one, 0);
  EXPECT_EQ(weight_casts_in_a_step(4), one);
}

// f16 loss scaling: the overflow check stays on the device, the optimizer's update is masked by it
// (parameters and AdamW's moments keep their bits on a skipped step) and the host updates the
// scale after each replay. A fast-growing scale (doubling every 2 clean steps) makes some steps
// overflow; the run is eager's bit for bit, skipped steps and loss scales included.
TEST(StaticTrain, F16LossScalingWithSkippedStepsEqualsEager) {
  const auto metrics = trireme::testing::expect_static_equals_eager(
      "f16", {"train.precision=f16", "train.loss_scale_interval=2", "optim.grad_clip=0.5"});
  int64_t skipped = 0;
  for (const auto& m : metrics) skipped = std::max(skipped, m.value("skipped_steps", int64_t(0)));
  EXPECT_GT(skipped, 0) << "the test should skip some steps";
}
