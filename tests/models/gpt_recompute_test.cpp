// Full recomputation in the GPT replays each block only as far as the backward reads it
// (gpt_recompute_check.h), in f32 and under bf16 autocast; the CUDA twin is in tests/cuda.
#include "gpt_recompute_check.h"

TEST(GPTRecompute, FullRecomputationReplaysAllButEachBlocksLastLinear) {
  trireme::testing::expect_recomputation_replays_all_but_each_blocks_last_linear(trireme::Device::cpu(), false);
  trireme::testing::expect_recomputation_replays_all_but_each_blocks_last_linear(trireme::Device::cpu(), true);
}
