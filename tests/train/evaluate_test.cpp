// Perplexity of a model on a text (train/evaluate.h): every token after the first is predicted
// exactly once whatever the stride, the numbers agree with the model's own loss, and texts that
// cannot be scored are refused clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "trireme/autograd/grad_mode.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/ops/factory.h"
#include "trireme/train/evaluate.h"

namespace trireme::train {
namespace {

const char* kText = "床前明月光，疑是地上霜。举头望明月，低头思故乡。白日依山尽，黄河入海流。欲穷千里目，更上一层楼。";

struct Fixture {
  io::CharTokenizer tok = io::CharTokenizer::train(kText);
  models::GPT gpt{{.vocab_size = tok.vocab_size(), .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 16}, 7};
};

// The mean loss of predicting ids[1..n) from windows of the model's block_size, by hand.
double loss_by_hand(models::GPT& gpt, const std::vector<int32_t>& ids, int64_t begin, int64_t len) {
  NoGradGuard no_grad;
  std::vector<int64_t> in(ids.begin() + begin, ids.begin() + begin + len),
      target(ids.begin() + begin + 1, ids.begin() + begin + len + 1);
  return gpt.loss(from_vector(in, {1, len}), from_vector(target, {1, len})).item();
}

TEST(Evaluate, NonOverlappingWindowsMatchTheModelsLoss) {
  Fixture f;
  const std::vector<int32_t> ids = f.tok.encode(kText);
  const int64_t n = int64_t(ids.size());  // 48 characters: windows of 8 targets, the last shorter
  TextScore s = score_text(f.gpt, f.tok, kText);
  EXPECT_EQ(s.tokens, n);
  EXPECT_EQ(s.scored_tokens, n - 1);
  EXPECT_EQ(s.windows, (n - 1 + 7) / 8);
  double nats = 0;
  for (int64_t b = 0; b < n - 1; b += 8) {
    const int64_t len = std::min<int64_t>(8, n - 1 - b);
    nats += loss_by_hand(f.gpt, ids, b, len) * double(len);
  }
  EXPECT_NEAR(s.nats_per_token, nats / double(n - 1), 1e-5);
  EXPECT_NEAR(s.bits_per_token, s.nats_per_token / std::numbers::ln2, 1e-9);
  EXPECT_NEAR(s.perplexity, std::exp(s.nats_per_token), 1e-6);
  // One character per token: per character equals per token.
  EXPECT_EQ(s.scored_characters, n - 1);
  EXPECT_NEAR(s.nats_per_char, s.nats_per_token, 1e-12);
  EXPECT_EQ(s.unknown_tokens, 0);
}

TEST(Evaluate, EveryStrideScoresEachTokenOnceAndTheBatchDoesNotMatter) {
  Fixture f;
  const TextScore one_by_one = score_text(f.gpt, f.tok, kText, {.stride = 3, .batch_size = 1});
  const TextScore batched = score_text(f.gpt, f.tok, kText, {.stride = 3, .batch_size = 8});
  EXPECT_EQ(one_by_one.scored_tokens, one_by_one.tokens - 1);
  EXPECT_NEAR(one_by_one.nats_per_token, batched.nats_per_token, 1e-5);
  for (int64_t stride : {1, 2, 5, 7, 8}) {
    const TextScore s = score_text(f.gpt, f.tok, kText, {.stride = stride});
    EXPECT_EQ(s.scored_tokens, s.tokens - 1) << "stride " << stride;
    EXPECT_TRUE(std::isfinite(s.nats_per_token));
  }
  // A text of block_size + 1 tokens is one window whatever the stride.
  const std::string nine = "床前明月光，疑是地";
  const std::vector<int32_t> ids = f.tok.encode(nine);
  EXPECT_NEAR(score_text(f.gpt, f.tok, nine, {.stride = 2}).nats_per_token, loss_by_hand(f.gpt, ids, 0, 8), 1e-5);
}

TEST(Evaluate, TextsThatCannotBeScoredAreRefused) {
  Fixture f;
  EXPECT_THROW(score_text(f.gpt, f.tok, "", {}, "poems.txt"), EvalInputError);
  try {
    score_text(f.gpt, f.tok, "床", {}, "poems.txt");
    FAIL() << "one token was scored";
  } catch (const EvalInputError& e) {
    EXPECT_NE(std::string(e.what()).find("poems.txt is 1 token long"), std::string::npos) << e.what();
  }
  EXPECT_THROW(score_text(f.gpt, f.tok, kText, {.stride = 9}), Error) << "a stride beyond block_size";
  // Characters the tokenizer lacks are counted, not hidden.
  EXPECT_EQ(score_text(f.gpt, f.tok, "床前xy月光").unknown_tokens, 2);
}

}  // namespace
}  // namespace trireme::train
