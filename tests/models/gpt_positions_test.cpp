// The positions GPT::forward embeds are kept between calls (models::PositionCache): a change of
// sequence length must make them again, so the model's answer never depends on earlier calls.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/core/rng.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/view.h"

using namespace trireme;

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor ca = contiguous(a), cb = contiguous(b);
  EXPECT_EQ(ca.sizes(), cb.sizes());
  double m = 0;
  for (int64_t i = 0; i < ca.numel(); ++i) m = std::max(m, std::abs(double(ca.data<float>()[i]) - cb.data<float>()[i]));
  return m;
}
}  // namespace

TEST(GPTPositions, ShorterThenLongerSequencesMatchAFreshModel) {
  models::GPTConfig c{.vocab_size = 40, .block_size = 8, .n_layer = 2, .n_head = 2, .d_model = 16};
  std::vector<int64_t> ids8;
  for (int64_t i = 0; i < 16; ++i) ids8.push_back(int64_t(rng_uniform(7, 0, uint64_t(i)) * 40) % 40);
  const Tensor x8 = from_vector<int64_t>(ids8, {2, 8});
  const Tensor x5 = contiguous(narrow(x8, 1, 0, 5));

  models::GPT fresh(c, /*seed=*/3);
  const Tensor want8 = fresh.forward(x8);

  models::GPT gpt(c, /*seed=*/3);
  const Tensor first8 = gpt.forward(x8);
  const Tensor got5 = gpt.forward(x5);  // T 8 -> 5: the positions are made again
  const Tensor again8 = gpt.forward(x8);  // and back
  EXPECT_EQ(max_abs_diff(first8, want8), 0.0);
  EXPECT_EQ(max_abs_diff(again8, want8), 0.0);
  // Causal attention: the first 5 positions of the T = 8 logits are the T = 5 logits.
  ASSERT_EQ(got5.size(1), 5);
  EXPECT_LT(max_abs_diff(got5, narrow(want8, 1, 0, 5)), 1e-5);
}
