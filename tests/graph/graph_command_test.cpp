// `trireme graph`: the traced step's calls before and after each pass, the memory plan beside the
// eager peak, the dot file; a layout of several processes is exit 2 saying how to trace one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/run_command.h"
#include "tiny_trainer_config.h"

namespace fs = std::filesystem;
using trireme::cli_testing::run;

namespace {
const std::string kTiny =
    "--vocab 50 --set model.d_model=32 --set model.n_layer=1 --set model.n_head=2 --set model.block_size=16 "
    "--set train.batch_size=2 --set model.dropout=0.1";
}

// The planned arena of a step under a recomputation mode, in bytes.
long long arena_bytes(const std::string& recompute) {
  auto r = run("graph --vocab 512 --set model.d_model=128 --set model.n_layer=4 --set model.n_head=2 "
               "--set model.block_size=64 --set train.batch_size=4 --set memory.recompute=" + recompute);
  EXPECT_EQ(r.status, 0) << r.out;
  const size_t at = r.out.find("arena: ");
  return at == std::string::npos ? -1 : std::stoll(r.out.substr(at + 7));
}

TEST(GraphCommand, RecomputationLowersTheArena) {
  // Common-subexpression elimination must not merge the recomputation back into the forward.
  const long long none = arena_bytes("none"), selective = arena_bytes("selective"), full = arena_bytes("full");
  EXPECT_LT(selective, none * 0.8);
  EXPECT_LT(full, selective);
}

TEST(GraphCommand, PrintsThePassesAndTheMemoryPlanAndWritesDot) {
  const fs::path dot = fs::path(trireme::testing::fresh_run_dir("trireme_graph_cmd")) += ".dot";
  auto r = run("graph " + kTiny + " --dot " + dot.string());
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* part : {"kernel calls per step:", "traced", "after dead-code elimination", "after common subexpressions",
                           "casts folded into norms", "residual adds folded into norms", "gradient adds folded into norms", "gradient casts folded into norms", "GELU folded into GEMMs", "clipping in multi-tensor calls", "matmul_gelu_backward", "after elementwise fusion", "fused elementwise calls:", "scheduled for memory", "multi-tensor AdamW", "adamw_multi", "dropout", "arena:", "eager peak", "arena / eager peak"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " not in:\n" << r.out;
  }
  std::ifstream in(dot);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().rfind("digraph step {", 0), 0u);
  EXPECT_NE(text.str().find("-> n"), std::string::npos);
  fs::remove(dot);
}

TEST(GraphCommand, ShowsTheFusedGroupsOfALlamaStep) {
  auto r = run("graph " + kTiny + " --set model.arch=llama --set train.precision=bf16 --list");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* part : {"after elementwise fusion", "mul+silu_backward bf16", "fused:mul+silu_backward"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " not in:\n" << r.out;
  }
}

TEST(GraphCommand, DataParallelIsTracedAsOneRankSaysHow) {
  auto r = run("graph " + kTiny + " --set parallel.dp=2");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--set parallel.dp=1 --set train.batch_size=1"), std::string::npos) << r.out;
}
