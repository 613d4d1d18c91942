// Pipeline layouts across 2-4 processes, tp2 x pp2 (tensor parallelism inside the stages, the
// vocabulary 61 padded to 62) among them, train a tiny GPT (d 32, 4 heads, vocab 61, T 8, batch 8,
// 4 micro-batches) for 20 steps with the same per-step losses (1e-4 relative) and final
// parameters (1e-4) as one process; the worker checks, and its log has the numbers.
#include "launch_helpers.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

namespace {

struct Layout {
  const char* name;
  int nproc;
  std::vector<std::string> args;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

}  // namespace

class PipelineEquivalence : public ::testing::TestWithParam<Layout> {};

TEST_P(PipelineEquivalence, MatchesOneProcess) {
  const Layout& l = GetParam();
  std::vector<std::string> cmd = {TRIREME_PIPELINE_WORKER};
  cmd.insert(cmd.end(), l.args.begin(), l.args.end());
  LaunchResult r = launch(quick_job(l.nproc, cmd));
  EXPECT_EQ(r.exit_code, 0) << r.message << "\n" << all_logs(r, l.nproc);
}

INSTANTIATE_TEST_SUITE_P(
    Dist, PipelineEquivalence,
    ::testing::Values(Layout{"pp2_gpipe", 2, {"--pp", "2", "--schedule", "gpipe"}},
                      Layout{"pp2_1f1b", 2, {"--pp", "2", "--schedule", "1f1b"}},
                      Layout{"pp4_1f1b", 4, {"--pp", "4", "--schedule", "1f1b"}},
                      Layout{"pp3_5layers", 3, {"--pp", "3", "--layers", "5", "--schedule", "1f1b"}},
                      Layout{"pp2_interleaved", 2, {"--pp", "2", "--schedule", "interleaved", "--virtual", "2"}},
                      Layout{"dp2_pp2", 4, {"--pp", "2", "--dp", "2", "--schedule", "1f1b", "--micro-batches", "2"}},
                      Layout{"tp2_pp2", 4, {"--pp", "2", "--tp", "2", "--schedule", "1f1b", "--micro-batches", "4"}}),
    [](const ::testing::TestParamInfo<Layout>& info) { return std::string(info.param.name); });
