// End-to-end training: a short run lowers the validation loss; resuming from a checkpoint gives
// bit-identical losses to an uninterrupted run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "trireme/io/config.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/generate.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

std::string run_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("trireme_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

io::Config small_config(const std::string& out_dir, int64_t steps, double dropout = 0.1) {
  return io::Config::parse(R"(
[model]
d_model = 32
n_layer = 2
n_head = 2
block_size = 16
bias = true
[data]
corpus = ["tang"]
tokenizer = "char"
[optim]
lr = 1e-2
[schedule]
kind = "cosine"
warmup_steps = 5
min_lr = 1e-3
[train]
batch_size = 8
eval_batches = 4
log_interval = 100
threads = 1
)", "test", {"train.out_dir=" + out_dir, "train.steps=" + std::to_string(steps),
             "train.eval_interval=" + std::to_string(steps), "train.checkpoint_interval=10",
             "model.dropout=" + std::to_string(dropout)});
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
