// The memory plan of a whole training step (a tiny GPT's forward, backward and AdamW update):
// no two buffers live at the same time share bytes, checked over every pair, and the arena is
// smaller than the eager run's peak of the step's own allocations.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/multi_tensor.h"
#include "trireme/graph/static_function.h"
#include "trireme/graph/trace.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/optim/adamw.h"

using namespace trireme;

namespace {

models::GPTConfig tiny_gpt() {
  return {.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .d_model = 32, .dropout = 0.1};
}

}  // namespace

TEST(MemoryPlan, NoTwoLiveBuffersOverlapInAGptStepAndTheArenaIsBelowTheEagerPeak) {
  models::GPT model(tiny_gpt(), 1);
  optim::AdamW opt(model.named_parameters(), {.lr = 1e-3});
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss = model.loss(in[0], in[1]);
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss.detach()};
  };
  Generator gen(3);
  Tensor x = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64), y = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64);
  model.set_rng(1, 0);
  step({x, y});  // the optimizer's state exists before the trace
  model.set_rng(1, 1);
  graph::Graph g = graph::optimize(graph::trace(step, {x, y}).graph);
  graph::MemoryPlan plan = graph::plan_memory(g);
  ASSERT_GT(plan.planned_buffers, 100);
  EXPECT_TRUE(graph::plan_conflicts(g, plan).empty());
  EXPECT_GT(g.eager_peak_bytes, 0u);
  EXPECT_LT(plan.arena_bytes, g.eager_peak_bytes) << graph::describe_memory(g, plan);
  EXPECT_LT(plan.arena_bytes, plan.intermediate_bytes);
  // The check itself finds an overlap when two buffers live together are put at one offset.
  for (size_t a = 0; a < g.buffers.size(); ++a) {
    if (plan.offset[a] < 0) continue;
    for (size_t b = a + 1; b < g.buffers.size(); ++b) {
      if (plan.offset[b] < 0 || plan.last[a] < plan.first[b] || plan.last[b] < plan.first[a]) continue;
      graph::MemoryPlan broken = plan;
      broken.offset[b] = broken.offset[a];
      EXPECT_FALSE(graph::plan_conflicts(g, broken).empty());
      return;
    }
  }
  ADD_FAILURE() << "no two buffers live at once";
}

TEST(MemoryPlan, SchedulingUpdatesEarlierShrinksTheArenaAndKeepsTheBits) {
  // Two copies of one model: one trained eagerly, one by replays of a scheduled graph.
  models::GPT eager_model(tiny_gpt(), 1), static_model(tiny_gpt(), 1);
  optim::AdamW eager_opt(eager_model.named_parameters(), {.lr = 1e-3}), static_opt(static_model.named_parameters(), {.lr = 1e-3});
  auto body = [](models::GPT& m, optim::AdamW& o, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss = m.loss(in[0], in[1]);
    loss.backward();
    o.step();
    o.zero_grad();
    return {loss.detach()};
  };
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return body(static_model, static_opt, in); });
  Generator gen(3);
  for (uint64_t step = 0; step < 5; ++step) {
    Tensor x = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64), y = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64);
    eager_model.set_rng(1, step);
    static_model.set_rng(1, step);
    Tensor le = body(eager_model, eager_opt, {x, y})[0];
    Tensor ls = step == 0 ? body(static_model, static_opt, {x, y})[0] : f({x, y})[0];
    EXPECT_TRUE(trireme::testing::bitwise_equal(le, ls)) << "step " << step;
  }
  const auto pe = eager_model.named_parameters(), ps = static_model.named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(trireme::testing::bitwise_equal(pe[i].second, ps[i].second)) << pe[i].first;
  ASSERT_NE(f.last(), nullptr);
  const graph::Graph& scheduled = f.last()->graph();
  graph::StaticOptions unscheduled;
  unscheduled.schedule_for_memory = false;
  unscheduled.multi_tensor_adamw = false;  // it merges the updates where they are: compared below
  // The same calls in another order, and a smaller arena: the gradients die after their update.
  graph::Graph traced = graph::trace([&](const std::vector<Tensor>& in) { return body(static_model, static_opt, in); },
                                     {to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64),
                                      to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64)}).graph;
  const graph::Graph plain = graph::optimize(traced, unscheduled), moved = graph::schedule_for_memory(plain);
  EXPECT_EQ(moved.nodes.size(), plain.nodes.size());
  EXPECT_EQ(graph::op_counts(moved), graph::op_counts(plain));
  EXPECT_LT(graph::plan_memory(moved).arena_bytes, graph::plan_memory(plain).arena_bytes);
  EXPECT_TRUE(graph::plan_conflicts(moved, graph::plan_memory(moved)).empty());
  // Then the updates merge where that costs no memory: every gradient dies at its update, so only
  // updates that no allocating call separates may merge, and the arena stays the scheduled graph's.
  const graph::Graph merged = graph::merge_adamw(moved);
  EXPECT_EQ(scheduled.nodes.size(), merged.nodes.size());
  EXPECT_LE(graph::plan_memory(merged).arena_bytes, graph::plan_memory(moved).arena_bytes);
  EXPECT_TRUE(graph::plan_conflicts(merged, graph::plan_memory(merged)).empty());
  // Unscheduled, the updates are adjacent at the end of the step: they all merge into one call.
  const auto merged_at_end = graph::op_counts(graph::merge_adamw(plain));
  EXPECT_EQ(merged_at_end.count("adamw"), 0u);
  EXPECT_EQ(merged_at_end.count("adamw_multi") ? merged_at_end.at("adamw_multi") : 0, 1);
}
