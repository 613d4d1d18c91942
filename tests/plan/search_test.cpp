// The layout search: only layouts the config allows, never one that fails its validation or the
// memory estimate, the best first, and impossible requests answered with what would work.
#include <gtest/gtest.h>

#include <set>

#include "trireme/io/config.h"
#include "trireme/plan/planner.h"
#include "trireme/train/memory_estimate.h"

namespace trireme::plan {
namespace {

io::Config config(const std::vector<std::string>& sets) { return io::Config::parse("", "test", sets); }

ClusterSpec gpus(int64_t nodes, double memory_gib = 80) {
  ClusterSpec c = cluster_preset("a100-80gb-nvlink", nodes);
  c.device.memory_gib = memory_gib;
  return c;
}

const std::vector<std::string> kModel = {"model.d_model=512",    "model.n_layer=8",     "model.n_head=8",
                                         "model.block_size=256", "train.batch_size=32", "train.precision=bf16"};

TEST(Search, EnumeratesOnlyWhatTheConfigAllows) {
  const io::TrainConfig tc = config(kModel).resolve();
  const auto layouts = enumerate_layouts(tc, 16);
  ASSERT_FALSE(layouts.empty());
  std::set<int64_t> tps, pps;
  for (const Layout& l : layouts) {
    EXPECT_EQ(l.devices(), 16);
    EXPECT_EQ(tc.model.n_head % l.tp, 0) << l.describe();
    EXPECT_LE(l.pp * l.virtual_stages, tc.model.n_layer) << l.describe();
    EXPECT_EQ(tc.train.batch_size % (l.dp * l.micro_batches), 0) << l.describe();
    if (l.sequence_parallel) {
      EXPECT_TRUE(l.tp > 1 && l.pp == 1) << l.describe();
    }
    if (l.schedule == "interleaved") {
      EXPECT_EQ(l.micro_batches % l.pp, 0) << l.describe();
    }
    if (l.zero_stage > 0) {
      EXPECT_GT(l.dp, 1) << l.describe();
    }
    tps.insert(l.tp), pps.insert(l.pp);
  }
  EXPECT_EQ(tps, (std::set<int64_t>{1, 2, 4, 8}));  // 16 does not divide 8 heads
  EXPECT_EQ(pps, (std::set<int64_t>{1, 2, 4, 8}));  // 16 stages > 8 layers
}

TEST(Search, EveryPlanPassesValidationAndFitsTheEstimate) {
  const io::Config cfg = config(kModel);
  const PlanInputs in = plan_inputs(cfg, gpus(2, 0.25), 0);  // 256 MiB devices: memory binds
  const SearchResult r = search_plans(cfg, in, 16, 50);
  ASSERT_FALSE(r.plans.empty()) << r.impossible;
  EXPECT_GT(r.unfit, 0);
  for (size_t i = 0; i < r.plans.size(); ++i) {
    const Plan& p = r.plans[i];
    EXPECT_EQ(validate_layout(cfg, p.layout), "") << p.layout.describe();
    io::TrainConfig tc = cfg.resolve();
    apply_layout(tc, p.layout);
    const double peak = train::estimate_training_memory(tc, 0).total();
    EXPECT_DOUBLE_EQ(p.cost.peak_bytes, peak) << p.layout.describe();
    EXPECT_LE(peak, 0.25 * double(1 << 30)) << p.layout.describe();
    if (i > 0) {
      EXPECT_LE(r.plans[i - 1].cost.step_s, p.cost.step_s);
    }
  }
  for (const Plan& p : r.faster_unfit) EXPECT_FALSE(p.cost.fits);
}

TEST(Search, ValidationHasTheLastWord) {
  const io::Config cfg = config(kModel);
  Layout bad{.dp = 1, .tp = 3};
  EXPECT_NE(validate_layout(cfg, bad).find("parallel.tp"), std::string::npos);
  Layout sgd_zero{.dp = 2, .zero_stage = 1};
  EXPECT_NE(validate_layout(config({"optim.name=sgd"}), sgd_zero).find("parallel.zero"), std::string::npos);
  // A valid layout reached through states that alone would fail (dp before micro_batches).
  EXPECT_EQ(validate_layout(config({"train.batch_size=6"}), Layout{.dp = 3, .micro_batches = 2}), "");
}

TEST(Search, TensorParallelAcrossNodesLosesToInsideANode) {
  const io::Config cfg = config(kModel);
  const PlanInputs in = plan_inputs(cfg, gpus(2), 0);
  const PlanCost inside = predict(in, Layout{.dp = 2, .tp = 8});
  const PlanCost across = predict(in, Layout{.dp = 1, .tp = 16 / 2, .pp = 2});
  EXPECT_GT(across.parts.bubble, 0);
  ClusterSpec narrow = in.cluster;
  narrow.devices_per_node = 4;  // now tp = 8 crosses nodes
  PlanInputs in2 = in;
  in2.cluster = narrow;
  const PlanCost crossing = predict(in2, Layout{.dp = 2, .tp = 8});
  EXPECT_GT(crossing.parts.tp_comm, inside.parts.tp_comm);
  EXPECT_NE(crossing.binding.find("between nodes"), std::string::npos) << crossing.binding;
}

TEST(Search, ZeroAndRecomputationTradeTimeForMemory) {
  const io::Config cfg = config(kModel);
  const PlanInputs in = plan_inputs(cfg, gpus(1), 0);
  const PlanCost plain = predict(in, Layout{.dp = 8});
  const PlanCost zero = predict(in, Layout{.dp = 8, .zero_stage = 1});
  const PlanCost recompute = predict(in, Layout{.dp = 8, .recompute = "full"});
  EXPECT_LT(zero.peak_bytes, plain.peak_bytes);
  EXPECT_LT(recompute.peak_bytes, plain.peak_bytes);
  EXPECT_GT(recompute.parts.compute, plain.parts.compute);
  const PlanCost gpipe = predict(in, Layout{.pp = 8, .micro_batches = 8, .schedule = "gpipe"});
  const PlanCost inter =
      predict(in, Layout{.pp = 4, .micro_batches = 8, .schedule = "interleaved", .virtual_stages = 2});
  EXPECT_GT(gpipe.parts.bubble, 0);
  EXPECT_GT(inter.parts.bubble, 0);
}

TEST(Search, ABatchNoLayoutSplitsIsRefusedWithWhatWorks) {
  const io::Config cfg = config({"model.n_layer=2", "model.n_head=2", "train.batch_size=5"});
  const SearchResult r = search_plans(cfg, plan_inputs(cfg, gpus(1), 0), 8, 3);
  EXPECT_TRUE(r.plans.empty());
  EXPECT_NE(r.impossible.find("no layout splits the run over 8 devices"), std::string::npos) << r.impossible;
  EXPECT_NE(r.impossible.find("batch sizes that work on 8 devices"), std::string::npos) << r.impossible;
}

TEST(Search, AModelThatFitsNowhereNamesALargerCluster) {
  const io::Config cfg = config(kModel);
  const SearchResult r = search_plans(cfg, plan_inputs(cfg, gpus(1, 0.02), 0), 2, 3);
  EXPECT_TRUE(r.plans.empty());
  EXPECT_NE(r.impossible.find("no layout of 2 devices fits in memory"), std::string::npos) << r.impossible;
  EXPECT_NE(r.impossible.find("devices ("), std::string::npos) << r.impossible;  // "N devices (k nodes) would fit"
}

TEST(Search, AThousandDevicesAreSearched) {
  const io::Config cfg = config({"model.d_model=2048", "model.n_layer=24", "model.n_head=16", "model.block_size=2048",
                                 "train.batch_size=512", "train.precision=bf16"});
  const SearchResult r = search_plans(cfg, plan_inputs(cfg, gpus(128), 80), 1024, 5);
  ASSERT_FALSE(r.plans.empty()) << r.impossible;
  EXPECT_GT(r.examined, 100);
  EXPECT_EQ(r.plans[0].layout.devices(), 1024);
  const std::string why = explain_plans(plan_inputs(cfg, gpus(128), 80), r, 1024);
  EXPECT_NE(why.find("The best plan"), std::string::npos);
  EXPECT_NE(why.find("across nodes"), std::string::npos) << why;
}

TEST(Search, TheConfigsOwnLayoutIsPricedAndRanked) {
  std::vector<std::string> sets = kModel;
  const io::Config none = config(sets);  // dp = tp = pp = 1: not a layout of 16 devices
  EXPECT_FALSE(search_plans(none, plan_inputs(none, gpus(2), 0), 16, 3).given.has_value());
  sets.insert(sets.end(), {"parallel.dp=4", "parallel.tp=4", "parallel.micro_batches=2"});
  const io::Config cfg = config(sets);
  const SearchResult r = search_plans(cfg, plan_inputs(cfg, gpus(2), 0), 16, 3);
  ASSERT_TRUE(r.given.has_value());
  EXPECT_EQ(r.given->layout, (Layout{.dp = 4, .tp = 4, .micro_batches = 2}));
  ASSERT_TRUE(r.given->cost.fits);
  EXPECT_GE(r.given_rank, 1);
  EXPECT_GE(r.given->cost.step_s, r.plans[0].cost.step_s);
  if (r.given_rank == 1) {
    EXPECT_EQ(r.given->cost.step_s, r.plans[0].cost.step_s);
  }
}

TEST(AutoPlan, OverridesRunTheChosenLayout) {
  const io::Config cfg = config(
      {"model.d_model=64", "model.n_layer=2", "model.block_size=32", "train.batch_size=4", "parallel.auto=true"});
  const AutoPlan a = auto_plan(cfg, 2, 0);
  EXPECT_EQ(a.plan.layout.devices(), 2);
  EXPECT_EQ(a.overrides.back(), "parallel.auto=false");
  const io::Config chosen = io::Config::parse(cfg.to_toml(), "auto", a.overrides);
  EXPECT_EQ(chosen.resolve().parallel.world_size(), 2);
  EXPECT_NE(a.log_line.find("predicted"), std::string::npos);
}

}  // namespace
}  // namespace trireme::plan
