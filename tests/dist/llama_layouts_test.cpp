// The llama architecture (grouped-query attention, rotary embeddings, SwiGLU, q/k/v biases) in
// the parallel layouts: tensor parallelism splitting q and kv heads matches one process, and 20
// training steps under tp, sequence parallelism, dp and ZeRO give one process's losses and
// parameters (parallel_worker.cpp, scenarios tp_llama and train:llama.*).
#include "parallel_worker.h"

using trireme::parallel::testing::expect_worker_ok;

TEST(LlamaTensorParallel, LossAndGradientsMatchOneProcessWithKvHeadsSplit) {
  expect_worker_ok(2, "tp_llama");
  expect_worker_ok(4, "tp_llama");
}

TEST(LlamaLayouts, TwentyStepsMatchOneProcess) {
  for (auto [n, layout] : {std::pair{2, "llama.tp2.sp"}, std::pair{4, "llama.dp2.tp2.zero"}}) {
    SCOPED_TRACE(layout);
    expect_worker_ok(n, std::string("train:") + layout);
  }
}
