// Static mode on the GPU replays as CUDA graphs (docs/STATIC_GRAPH.md, "CUDA graphs"): the
// captured replay gives the uncaptured replay's and eager's results bit for bit, and a call that
// cannot be captured runs between the graphs. Under autocast, GELU folded into the GEMMs' epilogues
// (graph/gemm_folds.h) rounds once less: bit for bit with that fold off, close with it on.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "graph/static_one_process_compare.h"
#include "graph/graph_test_util.h"
#include "trireme/amp/autocast.h"
#include "trireme/graph/static_function.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/grad_norm.h"

using namespace trireme;

namespace {

enum class Run { eager, uncaptured, captured };

// A small GPT trained `steps` steps with dropout, AdamW (weight decay) and clipping on the
// device (small enough a limit that it scales): per step the loss and the gradient norm, and the
// final parameters.
struct GptRun {
  std::vector<Tensor> losses, norms;
  std::vector<Tensor> params;
  graph::CaptureSummary capture;
  size_t calls = 0;  // the replayed graph's
};

GptRun train_gpt(Run run, bool autocast, int steps, bool fold_gelu = false) {
  const Device dev = Device::cuda(0);
  models::GPTConfig cfg{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .d_model = 64, .dropout = 0.1};
  models::GPT gpt(cfg, 0);
  gpt.to(dev);
  optim::AdamW opt(gpt.named_parameters(), {.lr = 3e-3, .weight_decay = 0.1});
  const parallel::ParallelContext ctx = parallel::ParallelContext::single();
  auto step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss;
    {
      amp::AutocastGuard guard(dev.type, DType::bf16, autocast);
      loss = gpt.loss(in[0], in[1]);
    }
    loss.backward();
    Tensor norm = parallel::clip_global_grad_norm_on_device(parallel::grad_pieces(gpt.named_parameters(), {}), 0.5, ctx);
    opt.step();
    opt.zero_grad(true);
    return {loss.detach(), norm};
  };
  graph::StaticFunction static_step(step, {.fold_into_gemms = fold_gelu, .cuda_graph = run == Run::captured});
  GptRun r;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> ids(2 * 32), tgt(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = int64_t((i * 7 + size_t(s) * 13) % 256);
      tgt[i] = int64_t((i * 11 + size_t(s) * 5 + 1) % 256);
    }
    // Fresh input tensors every step: the replay rebinds (or copies) them.
    Tensor x = from_vector(ids, {2, 32}, dev), y = from_vector(tgt, {2, 32}, dev);
    std::vector<Tensor> out = run == Run::eager || s == 0 ? step({x, y}) : static_step({x, y});
    r.losses.push_back(to_device(out[0], Device::cpu()));
    r.norms.push_back(to_device(out[1], Device::cpu()));
  }
  for (const auto& [name, p] : gpt.named_parameters()) r.params.push_back(to_device(p.detach(), Device::cpu()));
  if (static_step.last()) {
    r.capture = static_step.last()->capture_summary();
    r.calls = static_step.last()->graph().nodes.size();
  }
  return r;
}

void expect_same_runs(const GptRun& a, const GptRun& b, const char* what) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_TRUE(trireme::testing::bitwise_equal(a.losses[s], b.losses[s])) << what << ": loss of step " << s + 1;
    EXPECT_TRUE(trireme::testing::bitwise_equal(a.norms[s], b.norms[s])) << what << ": gradient norm of step " << s + 1;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(trireme::testing::bitwise_equal(a.params[i], b.params[i])) << what << ": parameter " << i;
}

void expect_captured_equals_uncaptured_and_eager(bool autocast) {
  const int steps = 6;  // eager, traced, then 4 replays
  GptRun eager = train_gpt(Run::eager, autocast, steps);
  GptRun uncaptured = train_gpt(Run::uncaptured, autocast, steps);
  GptRun captured = train_gpt(Run::captured, autocast, steps);
  expect_same_runs(captured, uncaptured, "captured vs uncaptured");
  expect_same_runs(captured, eager, "captured vs eager");
  // The whole step is one graph: AdamW's and dropout's changing scalars are read from device memory.
  EXPECT_EQ(captured.capture.graphs, 1);
  EXPECT_EQ(captured.capture.outside_calls, 0);
  EXPECT_EQ(size_t(captured.capture.captured_calls), captured.calls);
  EXPECT_GT(captured.calls, 50u);
  // Kernels allocate temporaries while captured (the embedding backward's sort scratch): they
  // come from the graph's private pool.
  EXPECT_GT(captured.capture.pool_bytes, 0u);
  EXPECT_EQ(uncaptured.capture.graphs, 0);
  // The losses change from step to step (the replays train).
  EXPECT_FALSE(trireme::testing::bitwise_equal(captured.losses[2], captured.losses[5]));
}

}  // namespace

TEST(CudaStaticGraph, CapturedGptTrainingEqualsUncapturedAndEager) {
  TRIREME_REQUIRE_GPU();
  expect_captured_equals_uncaptured_and_eager(/*autocast=*/false);
}

TEST(CudaStaticGraph, CapturedGptTrainingEqualsUncapturedAndEagerUnderAutocast) {
  TRIREME_REQUIRE_GPU();
  expect_captured_equals_uncaptured_and_eager(/*autocast=*/true);
}

// With GELU in the epilogues: the captured replay still equals the uncaptured one bit for bit, and
// eager within the rounding of the MLP's product (bf16: about 1e-2 relative to each value; the
// losses agree far closer).
TEST(CudaStaticGraph, GeluFoldedIntoTheGemmsStaysCloseToEagerUnderAutocast) {
  TRIREME_REQUIRE_GPU();
  const int steps = 6;
  GptRun eager = train_gpt(Run::eager, /*autocast=*/true, steps);
  GptRun uncaptured = train_gpt(Run::uncaptured, true, steps, /*fold_gelu=*/true);
  GptRun captured = train_gpt(Run::captured, true, steps, /*fold_gelu=*/true);
  expect_same_runs(captured, uncaptured, "captured vs uncaptured");
  for (size_t s = 0; s < eager.losses.size(); ++s) {
    const double e = eager.losses[s].item(), c = captured.losses[s].item();
    EXPECT_NEAR(c, e, 2e-3 * std::abs(e)) << "loss of step " << s + 1;
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    trireme::testing::expect_close(to_device(captured.params[i], Device::cuda(0)), eager.params[i], 5e-2,
                                   "parameter " + std::to_string(i));
  }
}

// index_select's CUDA kernel reads its indices on the host (a synchronizing copy), which a
// capture refuses: that call runs between two graphs, and the results stay the same.
TEST(CudaStaticGraph, UncapturableCallRunsBetweenGraphs) {
  TRIREME_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  auto fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor h = mul(in[0], in[0]);
    Tensor picked = index_select(h, 0, in[1]);
    return {add(picked, picked)};
  };
  graph::StaticFunction captured(fn, {.cuda_graph = true}), uncaptured(fn, {.cuda_graph = false});
  for (int s = 0; s < 4; ++s) {
    Generator g(uint64_t(s) + 1);
    Tensor x = to_device(randn({16, 8}, g), dev);
    Tensor idx = from_vector(std::vector<int64_t>{int64_t(s), 3, 15, int64_t(s) + 1}, {4}, dev);
    const Tensor eager = fn({x, idx})[0];
    EXPECT_TRUE(trireme::testing::bitwise_equal(captured({x, idx})[0], eager)) << "step " << s;
    EXPECT_TRUE(trireme::testing::bitwise_equal(uncaptured({x, idx})[0], eager)) << "step " << s;
  }
  const graph::CaptureSummary c = captured.last()->capture_summary();
  EXPECT_EQ(c.outside_calls, 1);  // index_select
  EXPECT_EQ(c.graphs, 2);         // the square before it, the sum after it
  EXPECT_EQ(captured.last()->capture_summary().captured_calls, 2);
}

// The trainer's static mode on the GPU (CUDA graphs by default) against its eager mode: dropout
// 0.1, AdamW, clipping; every step's loss and gradient norm, the validation loss and the final
// model and optimizer files bit for bit.
TEST(CudaStaticGraph, TrainerStaticRunEqualsEager) {
  TRIREME_REQUIRE_GPU();
  trireme::testing::expect_static_equals_eager(
      "cuda_graph", {"optim.lr=3e-3", "optim.grad_clip=1.0", "schedule.min_lr=3e-4", "train.device=cuda"}, 8);
}
