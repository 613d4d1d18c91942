// The cost model's closed forms: ring collectives, the pipeline bubble, what overlap hides.
#include <gtest/gtest.h>

#include "trireme/io/config.h"
#include "trireme/plan/planner.h"
#include "trireme/train/memory_estimate.h"

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

// Recomputing some of the blocks costs and saves in between none and all of them.
TEST(Recompute, SomeOfTheBlocksCostAndSaveInBetween) {
  const PlanInputs in = inputs({"model.n_layer=8", "model.d_model=512", "model.n_head=8", "train.batch_size=8"});
  for (const char* mode : {"selective", "full"}) {
    const PlanCost none = predict(in, Layout{}), all = predict(in, Layout{.recompute = mode});
    const PlanCost half = predict(in, Layout{.recompute = mode, .recompute_layers = 4});
    EXPECT_GT(half.parts.compute, none.parts.compute) << mode;
    EXPECT_LT(half.parts.compute, all.parts.compute) << mode;
    EXPECT_LT(half.peak_bytes, none.peak_bytes) << mode;
    EXPECT_GT(half.peak_bytes, all.peak_bytes) << mode;
  }
  // The search offers a quarter, a half and three quarters of each stage's blocks.
  std::vector<int64_t> counts;
  for (const Layout& l : enumerate_layouts(in.train, 1))
    if (l.recompute == "full" && l.micro_batches == 1) counts.push_back(l.recompute_layers);
  EXPECT_EQ(counts, (std::vector<int64_t>{-1, 2, 4, 6}));
  EXPECT_EQ((Layout{.recompute = "full", .recompute_layers = 2}).describe(), "dp=1 tp=1 pp=1 mb=1 zero=0 recompute=full:2");
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

// Calibrated rates: each micro-batch size and recomputation mode at its own measured rate, sizes
// between those measured interpolated in log tokens; the step's measured rest beside the model.
TEST(Calibrated, MicroBatchesAndRecomputationTakeTheirOwnMeasuredRates) {
  PlanInputs in = inputs({"model.n_layer=4", "model.d_model=256", "model.n_head=4", "model.block_size=128",
                          "train.batch_size=16"});
  DeviceSpec& dev = in.cluster.device;
  dev.achieved = {{"none", 2048, 100e12, 10e12}, {"none", 512, 50e12, 5e12}, {"full", 2048, 80e12, 10e12}};
  dev.step_fixed_s = 2e-3;
  dev.optimizer_s_per_parameter = 1e-11;
  const double d = 256, T = 128, V = in.vocab_size();
  const double block = in.costs.block_flops_per_token(d, T), head = in.costs.head_flops_per_token(d, V);
  auto expected = [&](double tokens, double m, double block_rate, double head_rate) {
    return m * tokens * (4 * block / block_rate + head / head_rate);
  };
  EXPECT_NEAR(predict(in, Layout{}).parts.compute, expected(2048, 1, 100e12, 10e12), 1e-12);
  EXPECT_NEAR(predict(in, Layout{.micro_batches = 4}).parts.compute, expected(512, 4, 50e12, 5e12), 1e-12);
  // 1,024 tokens: halfway between 512 and 2,048 in log tokens.
  EXPECT_NEAR(predict(in, Layout{.micro_batches = 2}).parts.compute, expected(1024, 2, 75e12, 7.5e12), 1e-12);
  // Full recomputation's measured rate holds its replay.
  EXPECT_NEAR(predict(in, Layout{.recompute = "full"}).parts.compute, expected(2048, 1, 80e12, 10e12), 1e-12);
  // Two of the four blocks recomputed (memory.recompute_layers = 2): two at each rate.
  EXPECT_NEAR(predict(in, Layout{.recompute = "full", .recompute_layers = 2}).parts.compute,
              2048 * (2 * block / 100e12 + 2 * block / 80e12 + head / 10e12), 1e-12);
  // Selective was not measured: the rate without recomputation.
  EXPECT_NEAR(predict(in, Layout{.recompute = "selective"}).parts.compute, expected(2048, 1, 100e12, 10e12), 1e-12);
  const PlanCost c = predict(in, Layout{});
  const auto ranks = train::estimate_training_memory_per_rank(in.train, in.vocab);
  EXPECT_NEAR(c.parts.optimizer, 2e-3 + 1e-11 * ranks.front().parameters, 1e-12);
}

TEST(Calibrated, AStepsLaterMicroBatchesCostWhatWasMeasuredBeyondItsFirst) {
  PlanInputs plain = inputs({"model.n_layer=4", "model.d_model=256", "model.n_head=4", "model.block_size=128",
                             "train.batch_size=16"});
  plain.cluster.device.achieved = {{"none", 2048, 100e12, 10e12}, {"none", 512, 50e12, 5e12}};
  PlanInputs in = plain;
  // A later micro-batch takes 1 ms more a block and 3 ms more the rest at 512 tokens, half that at 2,048.
  in.cluster.device.achieved = {{"none", 2048, 100e12, 10e12, 0.5e-3, 1.5e-3}, {"none", 512, 50e12, 5e12, 1e-3, 3e-3}};
  const double added = 4 * 1e-3 + 3e-3;  // four blocks and the rest, at 512 tokens
  auto extra = [&](const Layout& l) { return predict(in, l).parts.compute - predict(plain, l).parts.compute; };
  // Three of the four micro-batches are later ones; with one there is none.
  EXPECT_NEAR(extra(Layout{.micro_batches = 4}), 3 * added, 1e-12);
  EXPECT_NEAR(extra(Layout{}), 0, 1e-12);
  // Data parallelism, 512 tokens a micro-batch as above.
  EXPECT_NEAR(extra(Layout{.dp = 2, .micro_batches = 2}), added, 1e-12);
  // A tensor-parallel slice (priced as a micro-batch tp times smaller) holds half of each weight.
  EXPECT_NEAR(extra(Layout{.tp = 2, .micro_batches = 2}), added / 2, 1e-12);
  // Negative where the casts a later micro-batch reuses outweigh its adds.
  in.cluster.device.achieved = {{"none", 2048, 100e12, 10e12, -0.5e-6, -1.5e-6}, {"none", 512, 50e12, 5e12, -1e-6, -3e-6}};
  EXPECT_NEAR(extra(Layout{.micro_batches = 4}), -3 * added / 1000, 1e-12);
}

// Small micro-batches on a GPU: the host's queuing of a micro-batch's kernels (calibrated) is a
// floor under its time; where it is nearly all of it, the plan is host-bound and says so.
TEST(Calibrated, TheHostsQueuingIsAFloorAndBindsSmallMicroBatches) {
  PlanInputs in = inputs({"model.n_layer=4", "model.d_model=256", "model.n_head=4", "model.block_size=128",
                          "train.batch_size=16"});
  DeviceSpec& dev = in.cluster.device;
  // At 2,048 tokens the host takes 0.01 ms a block and 0.02 ms the rest; at 128 tokens 1 and 2 ms.
  dev.achieved = {{"none", 2048, 100e12, 10e12, 0, 0, 0.01e-3, 0.02e-3}, {"none", 128, 50e12, 5e12, 0, 0, 1e-3, 2e-3}};
  const double d = 256, T = 128, V = in.vocab_size();
  const double block = in.costs.block_flops_per_token(d, T), head = in.costs.head_flops_per_token(d, V);
  const PlanCost whole = predict(in, Layout{});
  EXPECT_NEAR(whole.parts.compute, 2048 * (4 * block / 100e12 + head / 10e12), 1e-12);
  EXPECT_NEAR(whole.host_s, 4 * 0.01e-3 + 0.02e-3, 1e-12);
  EXPECT_FALSE(whole.host_bound);
  EXPECT_EQ(whole.binding, "compute");
  // 16 micro-batches of one sequence: the host's 6 ms each outlast the device's work.
  const PlanCost small = predict(in, Layout{.micro_batches = 16});
  ASSERT_GT(6e-3, 128 * (4 * block / 50e12 + head / 5e12));
  EXPECT_NEAR(small.parts.compute, 16 * 6e-3, 1e-12);
  EXPECT_NEAR(small.host_s, 16 * 6e-3, 1e-12);
  EXPECT_TRUE(small.host_bound);
  EXPECT_EQ(small.binding, "the host's kernel launches");
  SearchResult r;
  r.plans = {{Layout{.micro_batches = 16}, small},
             {Layout{.micro_batches = 8}, predict(in, Layout{.micro_batches = 8})}};
  const std::string why = explain_plans(in, r, 1);
  EXPECT_NE(why.find("bound by the host's kernel launches"), std::string::npos) << why;
  EXPECT_NE(why.find("the host binds: queuing the kernels takes 96.0 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("train.mode = \"static\""), std::string::npos) << why;
  // Each tp rank queues all of a micro-batch's kernels: the host's time is not split.
  EXPECT_NEAR(predict(in, Layout{.tp = 2, .micro_batches = 16}).host_s, 16 * 6e-3, 1e-12);
  // Full recomputation queues the replayed forwards too.
  EXPECT_NEAR(predict(in, Layout{.micro_batches = 16, .recompute = "full"}).host_s,
              16 * ((4 + 4 * in.costs.forward_share) * 1e-3 + 2e-3), 1e-12);
  // In static mode a step is replayed as CUDA graphs: no host floor.
  PlanInputs replayed = in;
  replayed.train.train.mode = "static";
  const PlanCost graph = predict(replayed, Layout{.micro_batches = 16});
  EXPECT_EQ(graph.host_s, 0);
  EXPECT_FALSE(graph.host_bound);
  EXPECT_NEAR(graph.parts.compute, 16 * 128 * (4 * block / 50e12 + head / 5e12), 1e-12);
}

}  // namespace
}  // namespace trireme::plan
