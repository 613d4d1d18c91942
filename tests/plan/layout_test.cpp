// Layouts as config overrides, and the explanation's per-split comparisons.
#include <gtest/gtest.h>

#include <algorithm>

#include "trireme/io/config.h"
#include "trireme/plan/planner.h"

namespace trireme::plan {
namespace {

TEST(Layout, OverridesResolveToTheLayout) {
  const Layout l{.dp = 2,
                 .tp = 1,
                 .pp = 2,
                 .micro_batches = 4,
                 .schedule = "interleaved",
                 .virtual_stages = 2,
                 .zero_stage = 1,
                 .recompute = "full"};
  const io::Config c = io::Config::parse("", "t", {"model.n_layer=4", "train.batch_size=8"});
  ASSERT_EQ(validate_layout(c, l), "");
  const io::TrainConfig tc = io::Config::parse(c.to_toml(), "t", l.overrides()).resolve();
  io::TrainConfig applied = c.resolve();
  apply_layout(applied, l);
  EXPECT_EQ(tc.parallel.dp, 2);
  EXPECT_EQ(tc.parallel.pp, 2);
  EXPECT_EQ(tc.parallel.schedule, "interleaved");
  EXPECT_EQ(tc.parallel.virtual_stages, 2);
  EXPECT_EQ(tc.memory.recompute, "full");
  EXPECT_EQ(tc.parallel.zero, applied.parallel.zero);
  EXPECT_TRUE(bool(tc.parallel.zero));
  EXPECT_EQ(l.describe(), "dp=2 tp=1 pp=2 interleaved/v2 mb=4 zero=1 recompute=full");
}

TEST(Layout, EveryZeroStageIsALayoutOfTheConfig) {
  const io::Config c = io::Config::parse("", "t", {"model.n_layer=4", "train.batch_size=8"});
  for (int stage = 0; stage <= 3; ++stage) {
    const Layout l{.dp = 2, .micro_batches = 1, .zero_stage = stage};
    EXPECT_EQ(validate_layout(c, l), "") << "zero " << stage;
    EXPECT_EQ(io::Config::parse(c.to_toml(), "t", l.overrides()).resolve().parallel.zero, stage);
  }
  // ZeRO-3 in a pipeline is refused by the config, so the search does not offer it.
  EXPECT_NE(validate_layout(c, Layout{.dp = 2, .pp = 2, .micro_batches = 2, .zero_stage = 3}), "");
}

TEST(Explain, EachSplitInItsBestVariantOrWhyNot) {
  const io::Config cfg = io::Config::parse(
      "", "t",
      {"model.d_model=512", "model.n_layer=8", "model.n_head=8", "model.block_size=256", "train.batch_size=32"});
  ClusterSpec cluster = cluster_preset("a100-80gb-nvlink", 2);
  const PlanInputs in = plan_inputs(cfg, cluster, 0);
  const SearchResult r = search_plans(cfg, in, 16, 3);
  ASSERT_FALSE(r.plans.empty());
  for (const Plan& p : r.best_per_split) {
    if (!p.cost.fits) continue;
    EXPECT_EQ(validate_layout(cfg, p.layout), "") << p.layout.describe();
    // No faster fitting plan of the same split.
    for (const Plan& q : r.plans)
      if (q.layout.dp == p.layout.dp && q.layout.tp == p.layout.tp && q.layout.pp == p.layout.pp) {
        EXPECT_LE(p.cost.step_s, q.cost.step_s);
      }
  }
  const Plan* all_dp = best_for_split(r, 16, 1, 1);
  ASSERT_NE(all_dp, nullptr);
  const std::string why = explain_plans(in, r, 16);
  EXPECT_NE(why.find("The best plan"), std::string::npos) << why;
  EXPECT_NE(why.find("all data parallel"), std::string::npos) << why;
  EXPECT_NE(why.find("tp=8 inside a node"), std::string::npos) << why;
  EXPECT_EQ(why.find("across nodes"), std::string::npos) << why;  // 8 heads: no tp group spans nodes
  EXPECT_NE(why.find("all pipeline (dp=1 tp=1 pp=16) is not a layout"), std::string::npos) << why;
}

}  // namespace
}  // namespace trireme::plan
