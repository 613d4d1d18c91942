// Full recomputation in the GPT: each block's replay runs only as far as the backward reads it,
// so the MLP's second linear (whose output only flows into the block's output) is not run
// again, and the gradients are those of a run without recomputation.
#include <gtest/gtest.h>

#include "counting_tape.h"
#include "trireme/models/gpt.h"

using namespace trireme;

namespace {

struct Step {
  std::map<std::string, int> calls;
  std::vector<std::vector<float>> grads;
};

Step loss_and_backward(models::GPT::Recompute mode) {
  const models::GPTConfig c{.vocab_size = 48, .block_size = 16, .n_layer = 3, .n_head = 2, .d_model = 32};
  models::GPT gpt(c, /*seed=*/7);
  gpt.set_recompute(mode);
  std::vector<int64_t> ids, targets;
  for (int64_t i = 0; i < 2 * 16; ++i) ids.push_back((i * 7 + 3) % 48), targets.push_back((i * 5 + 1) % 48);
  const Tensor x = from_vector<int64_t>(ids, {2, 16}), y = from_vector<int64_t>(targets, {2, 16});
  Step s;
  {
    trireme::testing::CountingTape tape;
    gpt.loss(x, y).backward();
    s.calls = tape.calls;
  }
  for (const auto& [name, p] : gpt.named_parameters()) s.grads.push_back(p.grad().to_vector<float>());
  return s;
}

}  // namespace

TEST(GPTRecompute, FullRecomputationReplaysAllButEachBlocksLastLinear) {
  const Step plain = loss_and_backward(models::GPT::Recompute::none);
  const Step full = loss_and_backward(models::GPT::Recompute::full);
  // Per block the replay runs the attention's two linears and the MLP's first: three of four.
  EXPECT_EQ(full.calls.at("matmul"), plain.calls.at("matmul") + 3 * 3);
  EXPECT_EQ(full.calls.at("layer_norm"), plain.calls.at("layer_norm") + 2 * 3);
  EXPECT_EQ(full.grads, plain.grads);
}
