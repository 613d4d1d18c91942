// One process runs the same step runner as every parallel layout: gradient accumulation over
// micro-batches trains the model that whole batches train (and the summary's memory estimate
// is near the measured peak), and ZeRO, which needs data-parallel processes to shard over, is
// refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

TEST(OneProcess, MicroBatchesAccumulateToTheWholeBatchsTraining) {
  const std::string a = trireme::testing::fresh_run_dir("trireme_mb1"), b = trireme::testing::fresh_run_dir("trireme_mb4");
  // Dropout 0: the masks of a micro-batch are those of its rows of the whole batch either way,
  // but without it the comparison is only rounding.
  train::TrainSummary whole = train::Trainer(trireme::testing::tiny_trainer_config(a, 12, 0.0), {.quiet = true}).run();
  train::TrainSummary micro =
      train::Trainer(trireme::testing::tiny_trainer_config(b, 12, 0.0, {"parallel.micro_batches=4"}), {.quiet = true}).run();
  ASSERT_EQ(whole.losses.size(), 12u);
  ASSERT_EQ(micro.losses.size(), 12u);
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    EXPECT_NEAR(micro.losses[i], whole.losses[i], 1e-4 * std::abs(whole.losses[i])) << "step " << i + 1;
  }
  EXPECT_LT(micro.losses.back(), micro.losses.front());
  // The summary sets the estimate beside the measured peak (train/memory_estimate.h).
  for (const auto* s : {&whole, &micro}) {
    ASSERT_GT(s->peak_memory_bytes, 0);
    EXPECT_NEAR(double(s->estimated_peak_bytes) / double(s->peak_memory_bytes), 1.0, 0.1);
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(OneProcess, ZeroIsRefusedNamingTheKey) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_zero1");
  try {
    train::Trainer(trireme::testing::tiny_trainer_config(dir, 6, 0.0, {"parallel.zero=true"}), {.quiet = true}).run();
    ADD_FAILURE() << "zero in one process was accepted";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parallel.dp"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
