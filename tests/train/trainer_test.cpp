// End-to-end training: a short run lowers the validation loss; resuming from a checkpoint gives
// bit-identical losses to an uninterrupted run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/generate.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

std::string run_dir(const std::string& name) { return trireme::testing::fresh_run_dir("trireme_trainer_" + name); }

io::Config small_config(const std::string& out_dir, int64_t steps, double dropout = 0.1) {
  return trireme::testing::tiny_trainer_config(out_dir, steps, dropout, {"optim.lr=1e-2", "schedule.min_lr=1e-3"});
}

}  // namespace

TEST(Trainer, ShortRunLowersValidationLossAndGenerates) {
  const std::string dir = run_dir("e2e");
  train::TrainSummary s = train::Trainer(small_config(dir, 60), {.quiet = true}).run();
  EXPECT_EQ(s.steps, 60);
  EXPECT_LT(s.final_loss, s.first_loss - 1.0);
  EXPECT_LT(s.final_val_loss, s.initial_val_loss - 0.5);
  EXPECT_TRUE(fs::exists(s.metrics_path));
  EXPECT_TRUE(fs::exists(s.plot_path));
  train::TextGenerator g = train::load_generator(dir);
  std::string streamed;
  std::string text = g.generate("春", {.max_new_tokens = 10, .temperature = 0.8, .top_k = 10, .seed = 3},
                                [&](std::string_view piece) { streamed += piece; });
  EXPECT_EQ(streamed, text);
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text, g.generate("春", {.max_new_tokens = 10, .temperature = 0.8, .top_k = 10, .seed = 3}));
  fs::remove_all(dir);
}

TEST(Trainer, ResumeGivesBitIdenticalLosses) {
  const std::string a = run_dir("straight"), b = run_dir("resumed");
  train::TrainSummary full = train::Trainer(small_config(a, 20), {.quiet = true}).run();
  ASSERT_EQ(full.losses.size(), 20u);

  // Stop after 10 steps (a checkpoint is written at step 10), then resume to 20.
  train::TrainSummary first = train::Trainer(small_config(b, 20), {.quiet = true, .stop_after = 10}).run();
  train::TrainSummary rest = train::Trainer(small_config(b, 20), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(first.losses.size(), 10u);
  ASSERT_EQ(rest.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(first.losses[i], full.losses[i]) << "step " << i + 1;
    EXPECT_EQ(rest.losses[i], full.losses[10 + i]) << "step " << i + 11 << " after resuming";
  }
  fs::remove_all(a);
  fs::remove_all(b);
}
