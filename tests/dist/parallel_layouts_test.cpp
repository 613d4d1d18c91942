// Tensor and data parallelism across 2 and 4 processes: the tp layers and the tp GPT match one
// process, and 20 training steps in each layout give one process's losses (1e-4 relative) and
// parameters (1e-4).
#include "parallel_worker.h"

using trireme::parallel::testing::expect_worker_ok;

class TensorParallel : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallel, LayersMatchOneProcess) { expect_worker_ok(GetParam(), "tp_layers"); }
TEST_P(TensorParallel, GPTLossAndGradientsMatchOneProcess) { expect_worker_ok(GetParam(), "tp_gpt"); }

INSTANTIATE_TEST_SUITE_P(Parallel, TensorParallel, ::testing::Values(2, 4));

TEST(TensorParallelDeferredSums, MatchOneProcessAndRefuseAStepThatMixesPaths) { expect_worker_ok(2, "tp_defer_mixed"); }

class LayoutEquivalence : public ::testing::TestWithParam<std::pair<int, const char*>> {};

TEST_P(LayoutEquivalence, TwentyStepsMatchOneProcess) {
  expect_worker_ok(GetParam().first, std::string("train:") + GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(Parallel, LayoutEquivalence,
                         ::testing::Values(std::pair{2, "dp2"}, std::pair{2, "dp2.nooverlap"}, std::pair{2, "tp2"},
                                           std::pair{2, "tp2.sp"}, std::pair{4, "tp4.sp"}, std::pair{2, "tp2.sp.drop"},
                                           std::pair{4, "dp2.tp2.sp"}, std::pair{4, "dp2.tp2.sp.zero"},
                                           std::pair{2, "tp2.sp.defer"}, std::pair{4, "dp2.tp2.sp.mb2.defer"},
                                           std::pair{4, "dp2.tp2"}, std::pair{4, "dp4"}, std::pair{4, "tp4"},
                                           std::pair{2, "dp2.zero"}, std::pair{4, "dp2.tp2.zero"},
                                           std::pair{2, "dp2.mb2"}, std::pair{2, "tp2.drop"}),
                         [](const auto& info) {
                           std::string s = info.param.second;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });
