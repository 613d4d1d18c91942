// `trireme graph` with a pipeline: static mode runs a pipeline's schedule eagerly and traces only
// the step after it, so there is no whole step of one process to show; exit 2 says what to trace.
#include <gtest/gtest.h>

#include "cli/run_command.h"

using trireme::cli_testing::run;

TEST(GraphCommandPipeline, APipelineIsExit2NamingParallelPp) {
  auto r = run("graph --vocab 50 --set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 "
               "--set model.block_size=16 --set train.batch_size=2 --set parallel.pp=2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("parallel.pp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--set parallel.pp=1"), std::string::npos) << r.out;
}
