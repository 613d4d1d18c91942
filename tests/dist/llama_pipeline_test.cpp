// The llama architecture in pipeline layouts (1F1B over 2 stages, and tp 2 inside 2 stages with
// the kv heads split): 20 steps give one process's losses and parameters (the pipeline worker
// checks, as for the GPT-2 architecture in pipeline_equivalence_test.cpp).
#include "launch_helpers.h"

using namespace trireme::dist;
using namespace trireme::dist::testing;

TEST(LlamaPipeline, MatchesOneProcess) {
  for (auto [nproc, tp] : {std::pair{2, "1"}, std::pair{4, "2"}}) {
    SCOPED_TRACE(std::string("tp ") + tp);
    LaunchResult r = launch(quick_job(nproc, {TRIREME_PIPELINE_WORKER, "--arch", "llama", "--pp", "2", "--tp", tp,
                                              "--schedule", "1f1b", "--micro-batches", "4"}));
    EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, nproc);
  }
}
