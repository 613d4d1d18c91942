// Generation with a static forward (train/generate.h, GenerateMode::static_graph): the forward is
// traced once per context length bucket and replayed, the context padded to its bucket. A causal
// model's logits at a position do not see the padding after it, so each token's logits equal the
// eager forward's, and sampling draws the same text.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/io/tokenizer_char.h"
#include "trireme/train/generate.h"

namespace trireme::train {
namespace {

const char* kText = "床前明月光疑是地上霜举头望明月低头思故乡\n";

TextGenerator tiny_generator(models::GPTArch arch) {
  const io::CharTokenizer tok = io::CharTokenizer::train(kText);
  models::GPTConfig cfg{.vocab_size = tok.vocab_size(), .block_size = 48, .n_layer = 2, .n_head = 2, .d_model = 32};
  cfg.arch = arch;
  return TextGenerator(std::make_unique<models::GPT>(cfg, 11), std::make_unique<io::CharTokenizer>(tok));
}

float max_relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0f, std::abs(b[i])));
  return worst;
}

TEST(StaticGenerate, BucketsArePowersOfTwoFromSixteenUpToTheBlock) {
  EXPECT_EQ(static_context_bucket(1, 48), 16);
  EXPECT_EQ(static_context_bucket(16, 48), 16);
  EXPECT_EQ(static_context_bucket(17, 48), 32);
  EXPECT_EQ(static_context_bucket(33, 48), 48);
  EXPECT_EQ(static_context_bucket(48, 48), 48);
  EXPECT_EQ(static_context_bucket(5, 8), 8);
}

class StaticGenerateArch : public ::testing::TestWithParam<models::GPTArch> {};

TEST_P(StaticGenerateArch, EachLengthsLogitsEqualTheEagerForward) {
  TextGenerator eager = tiny_generator(GetParam());
  TextGenerator replayed = tiny_generator(GetParam());
  replayed.set_mode(GenerateMode::static_graph);
  std::vector<int32_t> ids;
  for (int64_t n = 1; n <= 60; ++n) {  // beyond block_size: the last 48 tokens
    ids.push_back(int32_t(1 + (n * 7) % (eager.tokenizer().vocab_size() - 1)));
    const std::vector<float> a = replayed.next_token_logits(ids), b = eager.next_token_logits(ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LE(max_relative_gap(a, b), 1e-5f) << "context of " << n << " tokens";
  }
  EXPECT_EQ(replayed.graphs_traced(), 3) << "buckets 16, 32 and 48";
  EXPECT_EQ(eager.graphs_traced(), 0);
}

TEST_P(StaticGenerateArch, SampledTextEqualsEagerGeneration) {
  TextGenerator eager = tiny_generator(GetParam());
  TextGenerator replayed = tiny_generator(GetParam());
  replayed.set_mode(GenerateMode::static_graph);
  for (double temperature : {0.0, 1.0}) {
    const SamplingOptions o{.max_new_tokens = 40, .temperature = temperature, .seed = 3};
    const std::string want = eager.generate("明月", o);
    EXPECT_EQ(replayed.generate("明月", o), want) << "temperature " << temperature;
    EXPECT_FALSE(want.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, StaticGenerateArch, ::testing::Values(models::GPTArch::gpt2, models::GPTArch::llama),
                         [](const auto& info) { return info.param == models::GPTArch::gpt2 ? "gpt2" : "llama"; });

}  // namespace
}  // namespace trireme::train
