// Runs too large for the machine are refused before anything is allocated, with the estimate,
// the available memory and the keys to change; a checkpoint whose config is out of range is
// refused by generate; a warm-up over the whole run trains.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/generate.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/trainer.h"

using namespace trireme;

namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

io::TrainConfig config_with(const std::vector<std::string>& overrides) {
  return io::Config::parse("", "test", overrides).resolve();
}

std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const io::ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

}  // namespace

TEST(MemoryCheck, ParameterEstimateMatchesTheModel) {
  for (bool tied : {true, false}) {
    for (bool bias : {true, false}) {
      io::TrainConfig tc = config_with({"model.d_model=64", "model.n_layer=3", "model.n_head=4", "model.block_size=32",
                                        std::string("model.bias=") + (bias ? "true" : "false"),
                                        std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
      models::GPTConfig gc{.vocab_size = 500, .block_size = 32, .n_layer = 3, .n_head = 4, .d_model = 64,
                           .bias = bias, .tie_embeddings = tied};
      train::MemoryEstimate e = train::estimate_training_memory(tc, 500);
      EXPECT_DOUBLE_EQ(e.parameters, double(gc.num_parameters()));
      EXPECT_DOUBLE_EQ(e.weight_bytes, 4 * e.parameters);
      EXPECT_DOUBLE_EQ(e.optimizer_bytes, 8 * e.parameters);  // AdamW m and v
      EXPECT_GT(e.activation_bytes, 0);
    }
  }
}

// The estimate against peaks measured on one H200 (the CUDA caching allocator's, bf16 autocast,
// 2026-12-03): GPT-2 124M with the default corpus's 2,841 characters over micro-batches and
// recomputation (docs/PLANNER.md), and GPT 6.7B under full recomputation (docs/PERFORMANCE.md).
TEST(MemoryCheck, TheEstimateHoldsToPeaksMeasuredOnAGpu) {
  struct Measured {
    const char* precision;
    int64_t micro_batches;
    const char* recompute;
    int recompute_layers;  // -1: every block
    double gib;
  };
  // GPT-2 124M, B 16, T 1024, the default corpus's vocabulary: `bench/gpu/plan.sh` (2026-12-03),
  // bf16 at commit 0e589d2, f16 (the first blocks of 12 recomputed whole) at 2f6a8f9.
  const std::vector<Measured> gpt2 = {
      {"bf16", 1, "none", -1, 6.5},      {"bf16", 1, "selective", -1, 4.9}, {"bf16", 1, "full", -1, 2.3},
      {"bf16", 2, "none", -1, 4.1},      {"bf16", 2, "selective", -1, 3.3}, {"bf16", 2, "full", -1, 2.0},
      {"bf16", 4, "none", -1, 2.8},      {"bf16", 4, "full", -1, 1.6},      {"bf16", 8, "none", -1, 2.1},
      {"bf16", 16, "selective", -1, 1.7}, {"bf16", 16, "full", -1, 1.4},
      {"f16", 1, "none", -1, 6.5},       {"f16", 1, "selective", 6, 5.6},   {"f16", 1, "full", 3, 5.3},
      {"f16", 1, "full", 6, 4.2},        {"f16", 1, "full", 9, 3.0},        {"f16", 2, "full", 3, 3.5},
      {"f16", 2, "full", 6, 2.9}};
  for (const Measured& m : gpt2) {
    const io::TrainConfig tc = config_with(
        {"model.d_model=768", "model.n_layer=12", "model.n_head=12", "model.block_size=1024", "train.batch_size=16",
         "train.device=cuda", std::string("train.precision=") + m.precision,
         "parallel.micro_batches=" + std::to_string(m.micro_batches), std::string("memory.recompute=") + m.recompute,
         "memory.recompute_layers=" + std::to_string(m.recompute_layers)});
    const double gib = train::estimate_training_memory(tc, 2841).total() / double(1 << 30);
    EXPECT_NEAR(gib / m.gib, 1.0, 0.05) << m.precision << ", " << m.micro_batches << " micro-batches, recompute "
                                        << m.recompute << " of " << m.recompute_layers;
  }
  const io::TrainConfig big = config_with({"model.d_model=4096", "model.n_layer=32", "model.n_head=32",
                                           "model.block_size=2048", "train.batch_size=8", "train.device=cuda",
                                           "train.precision=bf16", "memory.recompute=full"});
  EXPECT_NEAR(train::estimate_training_memory(big, 50304).total() / double(1 << 30) / 103.2, 1.0, 0.05);
}

TEST(MemoryCheck, RefusalGivesEstimateAvailableAndWhatToChange) {
  train::MemoryEstimate e{.parameters = 1e9, .weight_bytes = 4e9, .gradient_bytes = 4e9, .optimizer_bytes = 8e9,
                          .activation_bytes = 1e9};
  EXPECT_DOUBLE_EQ(e.total(), 16e9);  // the backward turns activations into gradients: the larger counts
  EXPECT_EQ(train::memory_refusal(e, e.total(), 32e9, Device::cpu(), "training", "lower model.n_layer"), "");
  std::string why = train::memory_refusal(e, e.total(), 8e9, Device::cpu(), "training", "lower model.n_layer");
  EXPECT_CONTAINS(why, "memory: training needs about 14.9 GiB (3.7 GiB weights + 7.5 GiB optimizer state + the "
                       "larger of 953.7 MiB activations and 3.7 GiB gradients");
  EXPECT_CONTAINS(why, "this machine has 7.5 GiB available; lower model.n_layer");
  EXPECT_EQ(why.find('\n'), std::string::npos);
}

TEST(MemoryCheck, AModelTooLargeForTheMachineIsAConfigErrorNamingTheKeys) {
  // 65536 layers of width 4096: about 13e12 parameters, 200 TB with gradients and AdamW.
  io::TrainConfig tc = config_with({"model.d_model=4096", "model.n_layer=65536"});
  std::string e = config_error_of([&] { train::check_training_memory(tc, 0, Device::cpu()); });
  EXPECT_CONTAINS(e, "memory: training needs about");
  EXPECT_CONTAINS(e, "available; lower model.n_layer or model.d_model");
  // A batch too large for the machine names the batch keys.
  tc = config_with({"train.batch_size=16777216", "model.block_size=4096"});
  e = config_error_of([&] { train::check_training_memory(tc, 0, Device::cpu()); });
  EXPECT_CONTAINS(e, "lower train.batch_size, model.block_size");
  // The defaults fit.
  EXPECT_NO_THROW(train::check_training_memory(config_with({}), 0, Device::cpu()));
  // So does the inference of a small model, not that of a huge one.
  EXPECT_NO_THROW(train::check_inference_memory(models::GPTConfig{}, Device::cpu()));
  e = config_error_of([&] {
    train::check_inference_memory(models::GPTConfig{.n_layer = 65536, .n_head = 1, .d_model = 1 << 20}, Device::cpu());
  });
  EXPECT_CONTAINS(e, "memory: the checkpoint's model needs about");
}

// A refusal lists the changes that need less, each with its estimate, smallest first: here the
// activations of a huge batch, which recomputation and more micro-batches shrink (on the CPU the
// processes share the machine, so splitting over more of them is not offered).
TEST(MemoryCheck, TheRefusalListsLighterAlternatives) {
  io::TrainConfig tc = config_with({"model.d_model=64", "model.n_layer=64", "model.block_size=4096", "train.batch_size=65536"});
  const std::string e = config_error_of([&] { train::check_training_memory(tc, 0, Device::cpu()); });
  EXPECT_CONTAINS(e, ". Instead: ");
  EXPECT_CONTAINS(e, "memory.recompute = \"full\" needs ");
  EXPECT_CONTAINS(e, "parallel.micro_batches = 2 needs ");
  EXPECT_EQ(e.find("parallel.tp ="), std::string::npos) << e;
  const std::string instead = e.substr(e.find("Instead: "));
  EXPECT_LT(instead.find("memory.recompute"), instead.find("parallel.micro_batches")) << "smallest first: " << e;
  EXPECT_CONTAINS(e, "trireme estimate");
}

TEST(MemoryCheck, TheRefusalNamesTheKeyThatSkipsIt) {
  io::TrainConfig tc = config_with({"model.d_model=4096", "model.n_layer=65536"});
  EXPECT_CONTAINS(config_error_of([&] { train::check_training_memory(tc, 0, Device::cpu()); }),
                  "--force, or --set train.memory_check=false, skips this check)");
  tc = config_with({"model.d_model=4096", "model.n_layer=65536", "train.memory_check=false"});
  EXPECT_NO_THROW(train::check_training_memory(tc, 0, Device::cpu()));
  // Inference has no config of its own to set: the refusal names generate's and eval's flag.
  EXPECT_CONTAINS(config_error_of([&] {
                    train::check_inference_memory(models::GPTConfig{.n_layer = 65536, .n_head = 1, .d_model = 1 << 20},
                                                  Device::cpu());
                  }),
                  "(--no-memory-check skips this check)");
}

TEST(MemoryCheck, TheTrainerRefusesBeforePreparingData) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_memory_check");
  io::Config cfg = trireme::testing::tiny_trainer_config(dir, 10, 0.0, {"model.d_model=4096", "model.n_layer=65536"});
  std::string e = config_error_of([&] { train::Trainer t(cfg, {.quiet = true}); });
  EXPECT_CONTAINS(e, "model.n_layer");
  EXPECT_FALSE(std::filesystem::exists(dir)) << "nothing is written before the check";
}

TEST(SizeLimits, WarmupOverTheWholeRunTrains) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_warmup_whole_run");
  io::Config cfg = trireme::testing::tiny_trainer_config(dir, 3, 0.0, {"schedule.warmup_steps=3"});
  train::TrainSummary s = train::Trainer(cfg, {.quiet = true}).run();
  EXPECT_EQ(s.steps, 3);
  std::filesystem::remove_all(dir);
}

TEST(SizeLimits, GenerateRefusesACheckpointWhoseConfigIsOutOfRange) {
  const std::string dir = trireme::testing::fresh_run_dir("trireme_huge_checkpoint");
  std::string toml = std::regex_replace(io::Config().to_toml(), std::regex("d_model = 256"), "d_model = 1623261534117349");
  toml = std::regex_replace(toml, std::regex("n_head = 4"), "n_head = 1");
  train::Checkpoint ck;
  ck.step = 1;
  ck.state = {{"config", toml}, {"tokenizer", {{"type", "char"}}}};
  train::save_checkpoint(std::filesystem::path(dir) / "checkpoints", ck);
  std::string e = config_error_of([&] { train::load_generator(dir); });
  EXPECT_CONTAINS(e, "model.d_model: expected an integer in [1, 1048576], got 1623261534117349");
  std::filesystem::remove_all(dir);
}
