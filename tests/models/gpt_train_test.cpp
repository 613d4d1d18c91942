// A short training run: a tiny GPT memorises a few fixed random token sequences, so the loss
// must fall well below the uniform-guess level ln(V).
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/models/gpt.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/optim/lr_schedule.h"

using namespace trireme;

TEST(GPTTraining, LossFallsOnATinyRandomTokenTask) {
  models::GPTConfig c{.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .d_model = 32};
  models::GPT gpt(c, /*seed=*/5);
  // Four sequences of 9 random tokens: inputs are the first 8, targets the last 8.
  std::vector<int64_t> ids, targets;
  for (int64_t b = 0; b < 4; ++b) {
    std::vector<int64_t> seq;
    for (int64_t t = 0; t < 9; ++t) seq.push_back(int64_t(rng_uniform(99, uint64_t(b), uint64_t(t)) * 32) % 32);
    ids.insert(ids.end(), seq.begin(), seq.begin() + 8);
    targets.insert(targets.end(), seq.begin() + 1, seq.end());
  }
  Tensor x = from_vector<int64_t>(ids, {4, 8}), y = from_vector<int64_t>(targets, {4, 8});

  optim::AdamW opt(gpt.named_parameters(), {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.0});
  optim::WarmupCosineLr schedule({.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 5, .total_steps = 60});
  std::vector<double> losses;
  for (int64_t step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss = gpt.loss(x, y);
    losses.push_back(loss.item());
    loss.backward();
    optim::clip_grad_norm(opt.params(), 1.0);
    opt.set_lr(schedule.lr(step));
    opt.step();
  }
  EXPECT_NEAR(losses.front(), std::log(32.0), 0.3);  // a fresh model guesses about uniformly
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front() << " last " << losses.back();
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}
