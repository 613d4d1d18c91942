// Full recomputation of a GPT on the GPU (gpt_recompute_check.h): the replay skips each block's
// last linear and the gradients equal those without recomputation, in f32 and under bf16
// autocast (attention by cuDNN where the build has it), for a tiny GPT and for one of GPT
// 6.7B's width, heads and length (two blocks), whose kernels take other paths.
#include "cuda_test_util.h"
#include "gpt_recompute_check.h"

TEST(CudaGPTRecompute, FullRecomputationReplaysAllButEachBlocksLastLinear) {
  TRIREME_REQUIRE_GPU();
  trireme::testing::expect_recomputation_replays_all_but_each_blocks_last_linear(trireme::Device::cuda(0), false);
  trireme::testing::expect_recomputation_replays_all_but_each_blocks_last_linear(trireme::Device::cuda(0), true);
}

TEST(CudaGPTRecompute, AtGPT67BsWidthTheReplayStillSkipsEachBlocksLastLinear) {
  TRIREME_REQUIRE_GPU();
  const trireme::models::GPTConfig c{.vocab_size = 512, .block_size = 2048, .n_layer = 2, .n_head = 32, .d_model = 4096};
  trireme::testing::expect_recomputation_replays_all_but_each_blocks_last_linear(trireme::Device::cuda(0), true, c);
}
