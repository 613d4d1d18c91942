// What a trace refuses, by name: host code reading a value the step computed, and an op drawing
// random numbers from a stream that is not an input of the trace.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/core/trace_hook.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/trace.h"
#include "trireme/kernels/kernel_tape.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"
#include "trireme/optim/adamw.h"

using namespace trireme;
using trireme::testing::random_tensor;

TEST(TraceErrors, AHostReadOfAComputedValueNamesTheAccessAndTheOp) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor s = sum(in[0]);
    if (s.item() > 0) return {exp(in[0])};  // data-dependent host control flow
    return {in[0]};
  };
  trireme::testing::expect_error([&] { graph::trace(fn, {random_tensor({4}, 1)}); },
                                 {"Tensor::item()", "op 'sum'", "return the tensor as an output"});
  // The hooks are gone after the failed trace: eager code runs as before.
  EXPECT_EQ(active_kernel_tape(), nullptr);
  EXPECT_EQ(storage_observer(), nullptr);
  EXPECT_NO_THROW(sum(random_tensor({4}, 1)).item());
}

TEST(TraceErrors, ReadingAnInputOrAHostFilledConstantIsFine) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const double first = in[0].at({0});                    // an input, not computed by the step
    Tensor c = from_vector<float>({1, 2, 3, 4}, {4});      // filled by host code: a constant
    return {mul(add(in[0], c), first)};
  };
  Tensor x = random_tensor({4}, 1);
  graph::TraceResult r = graph::trace(fn, {x});
  int constants = 0;
  for (const auto& b : r.graph.buffers) constants += b.kind == graph::BufferKind::constant;
  EXPECT_EQ(constants, 1);
}

TEST(TraceErrors, RandomNumbersFromAnUnboundStreamAreRefused) {
  NoGradGuard no_grad;
  graph::StepFn fn = [](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {dropout(in[0], 0.5, true, /*seed=*/1, /*stream=*/2, /*offset=*/0)};
  };
  trireme::testing::expect_error([&] { graph::trace(fn, {random_tensor({4}, 1)}); },
                                 {"op 'dropout'", "not an input of the trace", "the same ones"});
}

TEST(TraceErrors, AReplayInsideATraceIsRefused) {
  NoGradGuard no_grad;
  graph::Executable inner(graph::trace([](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {exp(in[0])}; },
                                       {random_tensor({4}, 1)})
                              .graph);
  graph::StepFn outer = [&](const std::vector<Tensor>& in) { return inner.run(in); };
  trireme::testing::expect_error([&] { graph::trace(outer, {random_tensor({4}, 2)}); }, {"cannot be replayed inside a trace"});
}

TEST(TraceErrors, StateCreatedInsideTheStepIsRefusedByShapeAndOp) {
  // An optimizer's first step creates its moments: traced, every replay would zero them again.
  Tensor w = random_tensor({3, 5}, 1).set_requires_grad(true);
  optim::AdamW opt({{"w", w}}, {.lr = 1e-2});
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor loss = sum(mul(w, in[0]));
    loss.backward();
    opt.step();
    opt.zero_grad();
    return {loss.detach()};
  };
  trireme::testing::expect_error([&] { graph::trace(step, {random_tensor({3, 5}, 2)}); },
                                 {"f32 tensor of shape [3, 5] created inside the traced step", "op 'fill'",
                                  "run the step once eagerly first"});
  step({random_tensor({3, 5}, 3)});  // the moments exist now: the step traces
  EXPECT_NO_THROW(graph::trace(step, {random_tensor({3, 5}, 2)}));
}
