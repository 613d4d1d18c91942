// The multi-process side of the parallel tests: test_dist re-runs itself under the launcher as
// `test_dist parallel-worker <scenario>`; a static initialiser in parallel_worker.cpp sees those
// arguments, runs the scenario on its rank and exits (0 when every check holds) before
// GoogleTest's main. Each rank computes the single-process reference itself, so the checks need
// no files. Scenarios:
//   tp_layers              column/row-parallel linear, vocab embedding and cross-entropy (tp = world)
//   tp_gpt                 models::GPT split over tp = world: loss and gradients vs one process
//   train:<layout>         20 AdamW steps vs one process, e.g. train:dp2, train:dp2.tp2, train:dp2.zero,
//                          train:tp2.drop (dropout 0.1), train:dp2.mb2 (2 micro-batches)
#pragma once

#include <string>

#include "launch_helpers.h"

namespace trireme::parallel::testing {

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  EXPECT_GT(n, 0);
  return std::string(buf, size_t(std::max<ssize_t>(n, 0)));
}

inline dist::LaunchResult run_parallel_worker(int nproc, const std::string& scenario) {
  auto o = dist::testing::quick_job(nproc, {self_exe(), "parallel-worker", scenario});
  return dist::launch(o);
}

// The scenario on nproc ranks, every one of which must pass (the ranks' logs on failure).
inline void expect_worker_ok(int nproc, const std::string& scenario) {
  auto r = run_parallel_worker(nproc, scenario);
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << dist::testing::all_logs(r, nproc);
}

}  // namespace trireme::parallel::testing
