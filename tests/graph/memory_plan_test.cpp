// The memory plan of a whole training step (a tiny GPT's forward, backward and AdamW update):
// no two buffers live at the same time share bytes, checked over every pair, and the arena is
// smaller than the eager run's peak of the step's own allocations.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/static_function.h"
#include "trireme/graph/trace.h"
#include "trireme/models/gpt.h"
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
