// A run can switch modes on resume: eager for 10 steps, then resumed in static mode (and the other
// way round) trains the model an uninterrupted eager run trains, bit for bit.
#include <gtest/gtest.h>

#include <filesystem>

#include "tiny_trainer_config.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

std::vector<double> interrupted_run(const std::string& dir, const std::string& first, const std::string& second) {
  const std::vector<std::string> common = {"optim.grad_clip=0.5"};
  auto with = [&](const std::string& mode) {
    std::vector<std::string> set = common;
    set.push_back("train.mode=" + mode);
    return trireme::testing::tiny_trainer_config(dir, 20, 0.1, set);
  };
  train::TrainSummary a = train::Trainer(with(first), {.quiet = true, .stop_after = 10}).run();
  train::TrainSummary b = train::Trainer(with(second), {.resume = true, .quiet = true}).run();
  std::vector<double> losses = a.losses;
  losses.insert(losses.end(), b.losses.begin(), b.losses.end());
  return losses;
}

}  // namespace

TEST(StaticResume, SwitchingModesOnResumeKeepsTheLosses) {
  const std::string whole_dir = trireme::testing::fresh_run_dir("trireme_static_resume_whole");
  const std::string a = trireme::testing::fresh_run_dir("trireme_static_resume_a");
  const std::string b = trireme::testing::fresh_run_dir("trireme_static_resume_b");
  train::TrainSummary whole =
      train::Trainer(trireme::testing::tiny_trainer_config(whole_dir, 20, 0.1, {"optim.grad_clip=0.5"}), {.quiet = true})
          .run();
  const std::vector<double> eager_then_static = interrupted_run(a, "eager", "static");
  const std::vector<double> static_then_eager = interrupted_run(b, "static", "eager");
  ASSERT_EQ(whole.losses.size(), 20u);
  ASSERT_EQ(eager_then_static.size(), 20u);
  ASSERT_EQ(static_then_eager.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(eager_then_static[i], whole.losses[i]) << "step " << i + 1;
    EXPECT_EQ(static_then_eager[i], whole.losses[i]) << "step " << i + 1;
  }
  for (const auto& d : {whole_dir, a, b}) fs::remove_all(d);
}
