// The cost model's closed forms: ring collectives, the pipeline bubble, what overlap hides.
#include <gtest/gtest.h>

#include "trireme/io/config.h"
#include "trireme/plan/planner.h"

namespace trireme::plan {
namespace {

TEST(Collectives, RingFormulas) {
  const LinkSpec link{1, 10};  // 1 GB/s, 10 us
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 1, link, 1), 0);
  // 2 (p-1)/p of the bytes each way, 2 (p-1) steps of latency.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 4, link, 1), 1.5 + 6 * 10e-6);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(1e9, 4, link, 1), 0.75 + 3 * 10e-6);
  EXPECT_DOUBLE_EQ(send_seconds(1e9, link, 0.5), 2 + 10e-6);
}

PlanInputs inputs(const std::vector<std::string>& sets) {
  const io::Config cfg = io::Config::parse("", "t", sets);
  return plan_inputs(cfg, cluster_preset("h100-nvlink", 1), 0);
}

TEST(Pipeline, TheBubbleIsStagesLessOneOverMicroBatchesAndVirtualStages) {
  // Tied embeddings and no vocabulary to speak of: the stages are nearly balanced, and tp = 1
  // leaves compute alone in each micro-batch's time.
  const PlanInputs in = inputs({"model.n_layer=8", "model.d_model=512", "model.n_head=8", "train.batch_size=16"});
  for (const auto& [schedule, v] :
       std::vector<std::pair<std::string, int64_t>>{{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}}) {
    const Layout l{.pp = 4, .micro_batches = 8, .schedule = schedule, .virtual_stages = v};
    const PlanCost c = predict(in, l);
    EXPECT_NEAR(c.parts.bubble / c.parts.compute, 3.0 / (8.0 * double(v)), 1e-9) << schedule;
    EXPECT_GT(c.parts.pp_comm, 0) << schedule;
  }
}

TEST(DataParallel, OverlapHidesTheReductionUpToTheBackward) {
  PlanInputs in = inputs({"model.n_layer=4", "model.d_model=256", "train.batch_size=64"});
  in.cluster.efficiency.dp_overlap = 0;
  const PlanCost exposed = predict(in, Layout{.dp = 8});
  in.cluster.efficiency.dp_overlap = 1;
  const PlanCost hidden = predict(in, Layout{.dp = 8});
  EXPECT_GT(exposed.parts.dp_comm, hidden.parts.dp_comm);
  EXPECT_DOUBLE_EQ(exposed.parts.compute, hidden.parts.compute);
  // ZeRO-1 gathers the updated parameters after the step: nothing hides that half.
  const PlanCost zero = predict(in, Layout{.dp = 8, .zero_stage = 1});
  EXPECT_GT(zero.parts.dp_comm, 0);
  EXPECT_LT(zero.parts.optimizer, hidden.parts.optimizer);
}

TEST(TensorParallel, SplitsTheComputeAndAddsAllReduces) {
  const PlanInputs in = inputs({"model.n_layer=4", "model.d_model=1024", "model.n_head=8", "train.batch_size=8"});
  const PlanCost one = predict(in, Layout{.dp = 1, .tp = 1});
  const PlanCost four = predict(in, Layout{.dp = 1, .tp = 4});
  EXPECT_LT(four.parts.compute, one.parts.compute);
  EXPECT_EQ(one.parts.tp_comm, 0);
  EXPECT_GT(four.parts.tp_comm, 0);
  const PlanCost sp = predict(in, Layout{.dp = 1, .tp = 4, .sequence_parallel = true});
  EXPECT_LT(sp.parts.compute, four.parts.compute);  // the layer norms and residuals split too
  EXPECT_LT(sp.peak_bytes, four.peak_bytes);
}

}  // namespace
}  // namespace trireme::plan
