// Elementwise fusion: which chains become one call, what must stay apart, and that a fused call
// gives the unfused calls' bits (broadcast inputs, bf16 intermediates, casts, many threads).
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "static_one_process_compare.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/fusion.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

int64_t fused_calls(const graph::Graph& g) {
  int64_t n = 0;
  for (const graph::Node& node : g.nodes) n += graph::fused_program(node) != nullptr;
  return n;
}

// The traced graph of fn after dead-code elimination, and the same graph fused; both replayed
// on `in` must give the same bits, and the fused plan must be conflict-free.
struct Fused {
  graph::Graph unfused, fused;
};
Fused trace_and_fuse(const graph::StepFn& fn, const std::vector<Tensor>& traced_on, const std::vector<Tensor>& in) {
  Fused f;
  f.unfused = graph::eliminate_dead_code(graph::trace(fn, traced_on).graph);
  f.fused = graph::fuse_elementwise(f.unfused);
  EXPECT_TRUE(graph::plan_conflicts(f.fused, graph::plan_memory(f.fused)).empty());
  std::vector<Tensor> a = graph::Executable(f.unfused).run(in), b = graph::Executable(f.fused).run(in);
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "output " << i;
  return f;
}

}  // namespace

TEST(Fusion, BiasScaleAndGeluBecomeOneCallWithoutIntermediates) {
  NoGradGuard no_grad;
  // x [64, 1024] times 0.5 plus a bias row broadcast over the rows (stride 0), then GELU: large
  // enough for the CPU loop to split its tiles among threads.
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {gelu(add(mul(in[0], 0.5), in[1]))};
  };
  const Shape s{64, 1024};
  Fused f = trace_and_fuse(fn, {random_tensor(s, 1), random_tensor({1024}, 2)}, {random_tensor(s, 3), random_tensor({1024}, 4)});
  ASSERT_EQ(f.unfused.nodes.size(), 3u);
  ASSERT_EQ(f.fused.nodes.size(), 1u);
  const FusedProgram* p = graph::fused_program(f.fused.nodes[0]);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name, "mul_scalar+add+gelu_tanh");
  EXPECT_EQ(p->inputs, 2);
  EXPECT_EQ(p->outputs.size(), 1u);
  EXPECT_EQ(f.fused.nodes[0].op, "fused:mul_scalar+add+gelu_tanh");
  // The two intermediates are gone from the plan.
  const graph::MemoryPlan before = graph::plan_memory(f.unfused), after = graph::plan_memory(f.fused);
  EXPECT_EQ(before.planned_buffers, 2);
  EXPECT_EQ(after.planned_buffers, 0);
  // And the replay is eager's.
  Tensor x = random_tensor(s, 5), b = random_tensor({1024}, 6);
  EXPECT_TRUE(bitwise_equal(graph::Executable(f.fused).run({x, b})[0], fn({x, b})[0]));
}

TEST(Fusion, Bf16IntermediatesRoundAsTheUnfusedKernelsStoreThem) {
  NoGradGuard no_grad;
  // Every step rounds to bf16; a fused loop that kept the f32 values between steps would differ
  // in many of these elements.
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor h = to_dtype(in[0], DType::bf16);
    return {to_dtype(mul(exp(mul(h, 1.7)), h), DType::f32)};
  };
  Fused f = trace_and_fuse(fn, {random_tensor({4096}, 1)}, {random_tensor({4096}, 2)});
  ASSERT_EQ(f.fused.nodes.size(), 1u) << graph::list_nodes(f.unfused) << graph::list_nodes(f.fused);
  const FusedProgram* p = graph::fused_program(f.fused.nodes[0]);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name, "copy+mul_scalar+exp+mul+copy");
  EXPECT_EQ(p->slot_dtype[size_t(p->steps[1].out)], DType::bf16);
  Tensor x = random_tensor({4096}, 7);
  EXPECT_TRUE(bitwise_equal(graph::Executable(f.fused).run({x})[0], fn({x})[0]));
}

TEST(Fusion, AnIntermediateReadOutsideTheChainKeepsTheChainApart) {
  NoGradGuard no_grad;
  // exp's result is also summed: it must be stored, so exp and mul stay two calls.
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor a = exp(in[0]);
    return {mul(a, 2.0), sum(a)};
  };
  Fused f = trace_and_fuse(fn, {random_tensor({256}, 1)}, {random_tensor({256}, 2)});
  EXPECT_EQ(fused_calls(f.fused), 0);
  EXPECT_EQ(f.fused.nodes.size(), f.unfused.nodes.size());
}

TEST(Fusion, AnInPlaceUpdateFusesWithTheChainThatFeedsIt) {
  NoGradGuard no_grad;
  // acc += tanh(x) * y: the add reads and writes the captured accumulator through one view.
  Tensor acc = random_tensor({512}, 1);
  graph::StepFn fn = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    add_(acc, mul(tanh(in[0]), in[1]));
    return {mul(in[0], 1.0)};
  };
  graph::Graph g = graph::eliminate_dead_code(graph::trace(fn, {random_tensor({512}, 2), random_tensor({512}, 3)}).graph);
  graph::Graph f = graph::fuse_elementwise(g);
  EXPECT_EQ(fused_calls(f), 1);
  EXPECT_LT(f.nodes.size(), g.nodes.size());
  Tensor x = random_tensor({512}, 4), y = random_tensor({512}, 5);
  Tensor expected = add(clone(acc), mul(tanh(x), y));
  graph::Executable(f).run({x, y});
  EXPECT_TRUE(bitwise_equal(acc, expected));
}

TEST(Fusion, ALlamaTrainedStaticallyUnderBf16EqualsEager) {
  // Its step fuses each MLP's SiLU backward with its product, in bf16, and the casts of the
  // gradients (trireme graph shows the groups): the replays must still train as eager does.
  trireme::testing::expect_static_equals_eager("fusion_llama_bf16", {"model.arch=llama", "model.bias=false", "train.precision=bf16"}, 8);
}
