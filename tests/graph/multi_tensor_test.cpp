// The multi-tensor AdamW pass (graph/multi_tensor.h): which updates merge, which a call between
// them keeps apart, and replays with merged updates equal eager bit for bit, with a weight decay
// and a learning rate per optimizer, under mixed dtypes, and in a whole GPT step.
#include <gtest/gtest.h>

#include "graph_test_util.h"
#include "many_params_step.h"
#include "trireme/graph/dump.h"
#include "trireme/graph/multi_tensor.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/static_function.h"
#include "trireme/graph/trace.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/optim/adamw.h"
#include "trireme/parallel/context.h"
#include "trireme/parallel/grad_norm.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

namespace {

Tensor parameter(const Shape& s, uint64_t seed, DType dtype = DType::f32) {
  Tensor t = random_tensor(s, seed);
  if (dtype != DType::f32) t = to_dtype(t, dtype);
  return t.set_requires_grad(true);
}

// Three parameters in two optimizers (their own learning rate and weight decay): `a` updates p1,
// then `b` updates p2 and p3 (of dtype `low`: bf16 takes f32 moments). With `probe`, a call
// between the two steps reads p1 after its update: p1's update may not move past it. p3 spans
// more than one CPU chunk of the kernel.
struct ThreeParams {
  Tensor p1, p2, p3;
  optim::AdamW a, b;
  bool probe;

  ThreeParams(bool probe, DType low = DType::f32)
      : p1(parameter({3, 5}, 1)),
        p2(parameter({7}, 2, low)),
        p3(parameter({70001}, 3, low)),
        a({{"p1", p1}}, {.lr = 1e-2, .weight_decay = 0.1}),
        b({{"p2", p2}, {"p3", p3}}, {.lr = 2e-2, .betas = {0.8, 0.99}, .weight_decay = 0.0}),
        probe(probe) {}

  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    auto term = [](const Tensor& p, const Tensor& x) { return to_dtype(sum(mul(p, to_dtype(x, p.dtype()))), DType::f32); };
    Tensor loss = add(add(term(p1, in[0]), term(p2, in[1])), term(p3, in[2]));
    loss.backward();
    a.step();
    std::vector<Tensor> out = {loss.detach()};
    if (probe) out.push_back(mul(p1.detach(), 2.0));
    b.step();
    a.zero_grad();
    b.zero_grad();
    return out;
  }

  void set_lr(int64_t step) {
    a.set_lr(1e-2 / double(step + 1));
    b.set_lr(2e-2 * double(step + 1));
  }
};

std::vector<Tensor> inputs(uint64_t seed) {
  return {random_tensor({3, 5}, seed), random_tensor({7}, seed + 100), random_tensor({70001}, seed + 200)};
}

int64_t count(const graph::Graph& g, const std::string& op) {
  auto counts = graph::op_counts(g);
  return counts.count(op) ? counts.at(op) : 0;
}

// Trains `eager` eagerly and `replayed` by replays of `pass` applied to its traced step (after the
// eager first step and the traced second), 6 steps with a learning rate that changes every step:
// the same outputs and parameters, bit for bit. Returns the replayed graph.
graph::Graph expect_replays_equal_eager(ThreeParams& eager, ThreeParams& replayed,
                                        const std::function<graph::Graph(const graph::Graph&)>& pass) {
  std::unique_ptr<graph::Executable> exe;
  for (int64_t s = 0; s < 6; ++s) {
    eager.set_lr(s);
    replayed.set_lr(s);
    const std::vector<Tensor> in = inputs(uint64_t(s) * 3 + 1);
    std::vector<Tensor> e = eager.step(in), r;
    if (s == 0) {
      r = replayed.step(in);
    } else if (s == 1) {
      graph::TraceResult t = graph::trace([&](const std::vector<Tensor>& x) { return replayed.step(x); }, in);
      r = t.outputs;
      exe = std::make_unique<graph::Executable>(pass(t.graph));
    } else {
      r = exe->run(in);
    }
    EXPECT_EQ(e.size(), r.size());
    for (size_t i = 0; i < e.size() && i < r.size(); ++i) EXPECT_TRUE(bitwise_equal(e[i], r[i])) << "step " << s << " output " << i;
  }
  for (auto [x, y] : {std::pair{&eager.p1, &replayed.p1}, {&eager.p2, &replayed.p2}, {&eager.p3, &replayed.p3}}) {
    EXPECT_TRUE(bitwise_equal(*x, *y)) << x->str();
  }
  return exe ? exe->graph() : graph::Graph{};
}

}  // namespace

TEST(MultiTensorAdamW, MergesTheUpdatesOfTwoOptimizersIntoOneCallAndEqualsEager) {
  ThreeParams eager(false), replayed(false);
  const graph::Graph g = expect_replays_equal_eager(
      eager, replayed, [](const graph::Graph& t) { return graph::merge_adamw(graph::eliminate_dead_code(t)); });
  EXPECT_EQ(count(g, "adamw"), 0);
  ASSERT_EQ(count(g, "adamw_multi"), 1);
  for (const graph::Node& n : g.nodes) {
    if (n.op == "adamw_multi") {
      EXPECT_EQ(n.calls, 3);
      EXPECT_TRUE(n.dynamic);
      EXPECT_EQ(n.args.size(), 12u);
    }
  }
  EXPECT_TRUE(graph::plan_conflicts(g, graph::plan_memory(g)).empty());
}

TEST(MultiTensorAdamW, ACallReadingAnUpdatedParameterKeepsItsUpdateApart) {
  ThreeParams eager(true), replayed(true);
  const graph::Graph g = expect_replays_equal_eager(
      eager, replayed, [](const graph::Graph& t) { return graph::merge_adamw(graph::eliminate_dead_code(t)); });
  // p1's update stays before the call that reads p1; p2's and p3's merge after it.
  EXPECT_EQ(count(g, "adamw"), 1);
  ASSERT_EQ(count(g, "adamw_multi"), 1);
  int update = -1, probe = -1, merged = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string& op = g.nodes[i].op;
    if (op == "adamw") update = int(i);
    if (op == "mul_scalar" && update >= 0 && merged < 0) probe = int(i);
    if (op == "adamw_multi") merged = int(i);
  }
  EXPECT_LT(update, probe);
  EXPECT_LT(probe, merged);
  EXPECT_EQ(g.nodes[size_t(merged)].calls, 2);
}

TEST(MultiTensorAdamW, Bf16ParametersWithF32StateMergePerDtypeAndEqualEager) {
  ThreeParams eager(false, DType::bf16), replayed(false, DType::bf16);
  const graph::Graph g = expect_replays_equal_eager(
      eager, replayed, [](const graph::Graph& t) { return graph::merge_adamw(graph::eliminate_dead_code(t)); });
  // p2 and p3 are bf16 (their moments f32): one bf16 call; p1, the only f32 update, stays alone.
  EXPECT_EQ(count(g, "adamw"), 1);
  ASSERT_EQ(count(g, "adamw_multi"), 1);
  for (const graph::Node& n : g.nodes) {
    if (n.op == "adamw_multi") {
      EXPECT_EQ(n.dtype, DType::bf16);
    }
  }
  EXPECT_EQ(eager.p3.dtype(), DType::bf16);
}

TEST(MultiTensorAdamW, OffLeavesOneCallPerParameter) {
  ThreeParams eager(false), replayed(false);
  graph::StaticOptions off;
  off.multi_tensor_adamw = false;
  const graph::Graph g =
      expect_replays_equal_eager(eager, replayed, [&](const graph::Graph& t) { return graph::optimize(t, off); });
  EXPECT_EQ(count(g, "adamw"), 3);
  EXPECT_EQ(count(g, "adamw_multi"), 0);
}

// A GPT step with clipping, its parameters in two optimizers (weight decay on the matrices only),
// replayed by a StaticFunction with the default passes: every update in one call, the same bits.
TEST(MultiTensorAdamW, GptStepWithClippingAndTwoWeightDecaysEqualsEager) {
  const models::GPTConfig cfg{.vocab_size = 40, .block_size = 16, .n_layer = 2, .n_head = 2, .d_model = 32, .dropout = 0.1};
  struct Run {
    models::GPT model;
    optim::AdamW decay, no_decay;
    static optim::NamedParams pick(const models::GPT& m, bool matrices) {
      optim::NamedParams out;
      for (const auto& [name, p] : m.named_parameters()) {
        if ((p.dim() >= 2) == matrices) out.emplace_back(name, p);
      }
      return out;
    }
    explicit Run(const models::GPTConfig& c)
        : model(c, 1),
          decay(pick(model, true), {.lr = 1e-3, .weight_decay = 0.1}),
          no_decay(pick(model, false), {.lr = 1e-3, .weight_decay = 0.0}) {}
    std::vector<Tensor> step(const std::vector<Tensor>& in) {
      Tensor loss = model.loss(in[0], in[1]);
      loss.backward();
      Tensor norm = parallel::clip_global_grad_norm_on_device(parallel::grad_pieces(model.named_parameters(), {}), 0.5,
                                                              parallel::ParallelContext::single());
      decay.step();
      no_decay.step();
      decay.zero_grad();
      no_decay.zero_grad();
      return {loss.detach(), norm};
    }
  };
  Run eager(cfg), replayed(cfg);
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return replayed.step(in); });
  Generator gen(3);
  for (uint64_t s = 0; s < 5; ++s) {
    Tensor x = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64), y = to_dtype(mul(rand({4, 16}, gen), 39.0), DType::i64);
    for (Run* r : {&eager, &replayed}) {
      r->model.set_rng(1, s);
      r->decay.set_lr(1e-3 * double(s + 1));
      r->no_decay.set_lr(2e-3 / double(s + 1));
    }
    std::vector<Tensor> e = eager.step({x, y}), r = s == 0 ? replayed.step({x, y}) : f({x, y});
    EXPECT_TRUE(bitwise_equal(e[0], r[0])) << "loss, step " << s;
    EXPECT_TRUE(bitwise_equal(e[1], r[1])) << "gradient norm, step " << s;
  }
  const auto pe = eager.model.named_parameters(), pr = replayed.model.named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_TRUE(bitwise_equal(pe[i].second, pr[i].second)) << pe[i].first;
  ASSERT_NE(f.last(), nullptr);
  const graph::Graph& g = f.last()->graph();
  EXPECT_EQ(count(g, "adamw"), 0);
  ASSERT_EQ(count(g, "adamw_multi"), 1);
  for (const graph::Node& n : g.nodes) {
    if (n.op == "adamw_multi") {
      EXPECT_EQ(size_t(n.calls), pe.size());
    }
  }
  EXPECT_TRUE(graph::plan_conflicts(g, f.last()->plan()).empty());
}

// Many parameters of two dtypes in two optimizers: one call per dtype, the same bits.
TEST(MultiTensorAdamW, ManyParametersOfTwoDtypesBecomeOneCallPerDtype) {
  trireme::testing::ManyParams eager(Device::cpu()), replayed(Device::cpu());
  graph::StaticFunction f([&](const std::vector<Tensor>& in) { return replayed.step(in); });
  for (int s = 0; s < 5; ++s) {
    for (trireme::testing::ManyParams* m : {&eager, &replayed}) {
      m->first.set_lr(1e-2 / double(s + 1));
      m->second.set_lr(3e-3 * double(s + 1));
    }
    Tensor scale = full({1}, 0.5 + 0.25 * s);
    std::vector<Tensor> e = eager.step({scale}), r = s == 0 ? replayed.step({scale}) : f({scale});
    EXPECT_TRUE(bitwise_equal(e[0], r[0])) << "loss, step " << s;
  }
  for (size_t i = 0; i < eager.params.size(); ++i) EXPECT_TRUE(bitwise_equal(eager.params[i], replayed.params[i])) << i;
  ASSERT_NE(f.last(), nullptr);
  const graph::Graph& g = f.last()->graph();
  EXPECT_EQ(count(g, "adamw"), 0);
  EXPECT_EQ(count(g, "adamw_multi"), 2);
  for (const graph::Node& n : g.nodes) {
    if (n.op == "adamw_multi") {
      EXPECT_EQ(n.calls, n.dtype == DType::bf16 ? 50 : 100);
    }
  }
}
