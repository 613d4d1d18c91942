// Shared by the CPU and CUDA tests of full recomputation in the GPT: each block's replay runs
// only as far as the backward reads it (kernels/deferred_kernels.h), so the MLP's second linear
// (whose output only flows into the block's output) is not run again, and the gradients are
// those of a run without recomputation, bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <optional>

#include "counting_tape.h"
#include "trireme/amp/autocast.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"

namespace trireme::testing {

inline void expect_recomputation_replays_all_but_each_blocks_last_linear(
    Device device, bool bf16_autocast,
    const models::GPTConfig& c = {.vocab_size = 48, .block_size = 16, .n_layer = 3, .n_head = 2, .d_model = 64}) {
  struct Step {
    std::map<std::string, int> calls;
    std::vector<std::vector<float>> grads;
  };
  auto run = [&](models::GPT::Recompute mode) {
    models::GPT gpt(c, /*seed=*/7);
    gpt.to(device);
    gpt.set_recompute(mode);
    std::vector<int64_t> ids, targets;
    const int64_t T = c.block_size, V = c.vocab_size;
    for (int64_t i = 0; i < 2 * T; ++i) ids.push_back((i * 7 + 3) % V), targets.push_back((i * 5 + 1) % V);
    const Tensor x = to_device(from_vector<int64_t>(ids, {2, T}), device);
    const Tensor y = to_device(from_vector<int64_t>(targets, {2, T}), device);
    Step s;
    {
      CountingTape tape;
      Tensor loss;
      {
        std::optional<amp::AutocastGuard> autocast;
        if (bf16_autocast) autocast.emplace(device.type, DType::bf16);
        loss = gpt.loss(x, y);
      }
      loss.backward();
      s.calls = tape.calls;
    }
    for (const auto& [name, p] : gpt.named_parameters()) s.grads.push_back(to_device(p.grad(), Device::cpu()).to_vector<float>());
    return s;
  };
  const Step plain = run(models::GPT::Recompute::none), full = run(models::GPT::Recompute::full);
  // Per block the replay runs the attention's two linears and the MLP's first: three of four.
  EXPECT_EQ(full.calls.at("matmul"), plain.calls.at("matmul") + 3 * c.n_layer);
  EXPECT_EQ(full.calls.at("layer_norm"), plain.calls.at("layer_norm") + 2 * c.n_layer);
  EXPECT_EQ(full.grads, plain.grads);
}

}  // namespace trireme::testing
