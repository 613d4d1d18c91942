// train.mode = "static" with recomputation: a checkpointed block re-runs its forward inside the
// traced backward (more kernel calls, its dropout masks redrawn from the streams the first run
// bound), and selective recomputation re-runs norms and activations when their saved outputs
// are unpacked; both train as eager does, bit for bit, with dropout on and two micro-batches.
#include <gtest/gtest.h>

#include <filesystem>

#include "graph_test_util.h"
#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/io/safetensors.h"
#include "trireme/train/metrics.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

void expect_same_tensor_file(const fs::path& a, const fs::path& b) {
  io::SafetensorsFile fa = io::load_safetensors(a.string()), fb = io::load_safetensors(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a;
  ASSERT_GT(fa.tensors.size(), 0u) << a;
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.tensors.count(name)) << name;
    EXPECT_TRUE(trireme::testing::bitwise_equal(t, fb.tensors.at(name))) << a.filename() << ": " << name;
  }
}

void expect_static_equals_eager(const std::string& recompute) {
  const std::string e = trireme::testing::fresh_run_dir("trireme_static_recompute_eager_" + recompute);
  const std::string s = trireme::testing::fresh_run_dir("trireme_static_recompute_static_" + recompute);
  const std::vector<std::string> common = {"memory.recompute=" + recompute, "parallel.micro_batches=2",
                                           "optim.grad_clip=0.5", "train.eval_interval=5"};
  std::vector<std::string> static_set = common;
  static_set.push_back("train.mode=static");
  train::TrainSummary eager =
      train::Trainer(trireme::testing::tiny_trainer_config(e, 20, 0.1, common), {.quiet = true}).run();
  train::TrainSummary stat =
      train::Trainer(trireme::testing::tiny_trainer_config(s, 20, 0.1, static_set), {.quiet = true}).run();
  ASSERT_EQ(eager.losses.size(), 20u);
  ASSERT_EQ(stat.losses.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(stat.losses[i], eager.losses[i]) << recompute << " step " << i + 1;
  EXPECT_EQ(stat.final_val_loss, eager.final_val_loss);
  std::vector<nlohmann::json> me = train::read_metrics(eager.metrics_path), ms = train::read_metrics(stat.metrics_path);
  ASSERT_EQ(me.size(), ms.size());
  for (size_t i = 0; i < me.size(); ++i) {
    EXPECT_EQ(ms[i]["grad_norm"].get<double>(), me[i]["grad_norm"].get<double>()) << recompute << " step " << i + 1;
    EXPECT_EQ(ms[i].value("graph_traces", int64_t(-1)), i == 0 ? 0 : 1) << recompute << " step " << i + 1;
  }
  ASSERT_FALSE(eager.checkpoint_path.empty());
  expect_same_tensor_file(fs::path(eager.checkpoint_path) / "model.safetensors",
                          fs::path(stat.checkpoint_path) / "model.safetensors");
  expect_same_tensor_file(fs::path(eager.checkpoint_path) / "optimizer.safetensors",
                          fs::path(stat.checkpoint_path) / "optimizer.safetensors");
  fs::remove_all(e);
  fs::remove_all(s);
}

}  // namespace

TEST(StaticRecompute, FullRecomputationEqualsEagerWithDropout) { expect_static_equals_eager("full"); }

TEST(StaticRecompute, SelectiveRecomputationEqualsEagerWithDropout) { expect_static_equals_eager("selective"); }
