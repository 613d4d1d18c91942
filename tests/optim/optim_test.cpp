// Optimizers against hand-computed steps, state save/restore, schedules and gradient clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <span>

#include "counting_tape.h"
#include "graph/graph_test_util.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/optim/adamw.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/optim/lr_schedule.h"
#include "trireme/optim/sgd.h"

using namespace trireme;

namespace {

Tensor param(const std::vector<double>& v, DType dtype = DType::f64) {
  Tensor t = to_dtype(from_vector<double>(v, {int64_t(v.size())}), dtype);
  t.set_requires_grad(true);
  return t;
}

void set_grad(const Tensor& p, const std::vector<double>& g) {
  p.set_grad(to_dtype(from_vector<double>(g, {int64_t(g.size())}), p.dtype()));
}

// Per-step gradients for three steps of a two-element parameter.
const std::vector<std::vector<double>> kGrads = {{0.5, -0.25}, {0.1, 0.3}, {-0.4, 0.05}};

}  // namespace

TEST(SGD, MomentumAndWeightDecayMatchHandComputedSteps) {
  for (bool nesterov : {false, true}) {
    const double lr = 0.1, mom = 0.9, wd = 0.01;
    Tensor p = param({1.0, -2.0});
    optim::SGD opt({{"w", p}}, {.lr = lr, .momentum = mom, .weight_decay = wd, .nesterov = nesterov});
    std::vector<double> ref = {1.0, -2.0}, buf = {0, 0};
    for (size_t s = 0; s < kGrads.size(); ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
      for (size_t i = 0; i < 2; ++i) {
        double g = kGrads[s][i] + wd * ref[i];
        buf[i] = s == 0 ? g : mom * buf[i] + g;
        ref[i] -= lr * (nesterov ? g + mom * buf[i] : buf[i]);
      }
      EXPECT_NEAR(p.at({0}), ref[0], 1e-15) << "step " << s;
      EXPECT_NEAR(p.at({1}), ref[1], 1e-15) << "step " << s;
    }
  }
  // Plain SGD, one literal step: p - lr * g.
  Tensor q = param({1.0});
  optim::SGD plain({{"q", q}}, {.lr = 0.5});
  set_grad(q, {0.25});
  plain.step();
  EXPECT_EQ(q.at({0}), 0.875);
}

TEST(AdamW, MatchesHandComputedSteps) {
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor p = param({1.0, -2.0}, dtype);
    optim::AdamW opt({{"w", p}}, {.lr = lr, .betas = {b1, b2}, .eps = eps, .weight_decay = wd});
    std::vector<double> ref = {1.0, -2.0}, m = {0, 0}, v = {0, 0};
    for (size_t s = 0; s < kGrads.size(); ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
      const double t = double(s + 1);
      for (size_t i = 0; i < 2; ++i) {
        const double g = kGrads[s][i];
        ref[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
        ref[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
      const double tol = dtype == DType::f64 ? 1e-14 : 1e-6;
      EXPECT_NEAR(p.at({0}), ref[0], tol) << dtype << " step " << s;
      EXPECT_NEAR(p.at({1}), ref[1], tol) << dtype << " step " << s;
    }
    EXPECT_EQ(opt.step_count(), 3);
    EXPECT_EQ(opt.state("w", "exp_avg").dtype(), dtype);
  }
  // The first step, literally: p (1 - lr wd) - lr * g / (|g| + eps) = 0.99 - 0.01 * 0.5 / (0.5 + 1e-8).
  Tensor q = param({1.0});
  optim::AdamW one({{"q", q}}, {.lr = 1e-2, .weight_decay = 1.0});
  set_grad(q, {0.5});
  one.step();
  EXPECT_NEAR(q.at({0}), 0.98 + 0.01 * 1e-8 / (0.5 + 1e-8), 1e-15);
}

TEST(AdamW, LowPrecisionParametersKeepF32State) {
  Tensor p = param({1.0, -2.0}, DType::bf16);
  optim::AdamW opt({{"w", p}}, {.lr = 0.1, .weight_decay = 0.0});
  set_grad(p, {1.0, -1.0});
  opt.step();
  EXPECT_EQ(opt.state("w", "exp_avg").dtype(), DType::f32);
  EXPECT_NEAR(p.at({0}), 0.9, 4e-3);   // bf16 rounding of 0.9
  EXPECT_NEAR(p.at({1}), -1.9, 8e-3);
}

TEST(AdamW, SkipsParametersWithoutGradients) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.1});
  set_grad(a, {1.0});
  opt.step();
  EXPECT_NE(a.at({0}), 1.0);
  EXPECT_EQ(b.at({0}), 2.0);
  EXPECT_FALSE(opt.state("b", "exp_avg").defined());
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// An eager step updates the parameters of one device and dtype in one multi-tensor call (a launch
// per parameter is what a GPU step's host pays for), with the bits of one call per parameter:
// the same parameters, stepped by an optimizer whose every call is its own.
TEST(AdamW, AnEagerStepIsOneMultiTensorCallPerDtypeWithTheBitsOfOneCallPerParameter) {
  class OnePerParameter final : public optim::AdamW {
   public:
    using AdamW::AdamW;

   protected:
    void update_all(std::span<const ParamUpdate> updates, int64_t step) override {
      Optimizer::update_all(updates, step);
    }
  };
  auto make = [] {
    Tensor t = Tensor::empty({7, 3}, DType::f32);  // a transposed view: updated on its own
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.01f * float(i) - 0.1f;
    Tensor view = transpose(t, 0, 1).detach();
    view.set_requires_grad(true);
    return optim::NamedParams{{"a", param({1.0, -2.0, 3.0})},
                              {"b", param({0.5, 0.25}, DType::bf16)},
                              {"c", param({-1.0, 4.0, 2.0, 8.0})},
                              {"d", param({0.75}, DType::bf16)},
                              {"e", view}};
  };
  const optim::AdamWOptions o{.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1};
  optim::NamedParams merged = make(), single = make();
  optim::AdamW opt(merged, o);
  OnePerParameter ref(single, o);
  for (int s = 0; s < 3; ++s) {
    for (optim::NamedParams* ps : {&merged, &single}) {
      for (auto& [name, p] : *ps) {
        Tensor g = full(p.sizes(), 0.3 * (s + 1) - (name == "c" ? 1.1 : 0.2), p.dtype());
        if (name == "e") g = transpose(contiguous(transpose(g, 0, 1)), 0, 1);  // the parameter's strides
        p.set_grad(g);
      }
    }
    trireme::testing::CountingTape tape;
    opt.step();
    EXPECT_EQ(tape.calls["adamw_multi"], 2) << "f64 and bf16, step " << s;
    EXPECT_EQ(tape.calls["adamw"], 1) << "the strided view, step " << s;
    ref.step();
    for (size_t i = 0; i < merged.size(); ++i) {
      ASSERT_TRUE(trireme::testing::bitwise_equal(merged[i].second, single[i].second)) << merged[i].first << " step " << s;
      for (const char* key : {"exp_avg", "exp_avg_sq"}) {
        ASSERT_TRUE(trireme::testing::bitwise_equal(opt.state(merged[i].first, key), ref.state(single[i].first, key)))
            << merged[i].first << "." << key << " step " << s;
      }
    }
  }
}

TEST(Optimizer, StateDictRestoresTrainingExactly) {
  auto run = [](optim::Optimizer& opt, const Tensor& p, size_t from, size_t to) {
    for (size_t s = from; s < to; ++s) {
      set_grad(p, kGrads[s]);
      opt.step();
    }
  };
  for (int kind = 0; kind < 2; ++kind) {
    auto make = [&](const Tensor& p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::AdamW>(optim::NamedParams{{"layer.w", p}}, optim::AdamWOptions{.lr = 0.05});
      return std::make_unique<optim::SGD>(optim::NamedParams{{"layer.w", p}}, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    };
    Tensor p = param({1.0, -2.0});
    auto opt = make(p);
    run(*opt, p, 0, 2);
    auto saved = opt->state_dict();
    std::map<std::string, Tensor> state(saved.begin(), saved.end());
    EXPECT_TRUE(state.count("step") && state.count("lr"));
    EXPECT_TRUE(state.count(kind == 0 ? "state.layer.w.exp_avg_sq" : "state.layer.w.momentum_buffer"));
    Tensor p_saved = clone(p.detach());
    run(*opt, p, 2, 3);

    Tensor q = clone(p_saved);
    q.set_requires_grad(true);
    auto restored = make(q);
    restored->load_state_dict(state);
    EXPECT_EQ(restored->step_count(), 2);
    run(*restored, q, 2, 3);
    EXPECT_EQ(q.to_vector<double>(), p.to_vector<double>()) << "kind " << kind;

    state["state.other.exp_avg"] = zeros({2}, DType::f64);
    EXPECT_THROW(restored->load_state_dict(state), Error);
  }
}

TEST(Optimizer, RejectsDuplicateOrNonLeafParameters) {
  Tensor p = param({1.0});
  EXPECT_THROW(optim::SGD({{"a", p}, {"b", p}}, {}), Error);
  EXPECT_THROW(optim::SGD({{"a", p}, {"a", param({1.0})}}, {}), Error);
  EXPECT_THROW(optim::SGD({{"a", p * 2.0}}, {}), Error);
}

TEST(LrSchedule, ConstantAndWarmupCosineAtKeySteps) {
  optim::ConstantLr constant(3e-4);
  EXPECT_EQ(constant.lr(0), 3e-4);
  EXPECT_EQ(constant.lr(100000), 3e-4);

  optim::WarmupCosineLr s({.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110});
  EXPECT_DOUBLE_EQ(s.lr(0), 0.1);   // (0 + 1) / 10
  EXPECT_DOUBLE_EQ(s.lr(4), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(9), 1.0);   // end of warm-up
  EXPECT_DOUBLE_EQ(s.lr(10), 1.0);  // cosine starts at max
  EXPECT_DOUBLE_EQ(s.lr(60), 0.55); // half way: (max + min) / 2
  EXPECT_NEAR(s.lr(109), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 99.0 / 100.0)), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(5000), 0.1);
  for (int64_t i = 10; i < 110; ++i) EXPECT_LE(s.lr(i + 1), s.lr(i));
  optim::WarmupCosineLr no_warmup({.max_lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4});
  EXPECT_DOUBLE_EQ(no_warmup.lr(0), 2.0);
  EXPECT_DOUBLE_EQ(no_warmup.lr(2), 1.0);
  EXPECT_THROW(optim::WarmupCosineLr({.warmup_steps = 6, .total_steps = 5}), Error);
}

TEST(ClipGradNorm, ReturnsTheGlobalNormAndScalesInPlace) {
  Tensor a = param({3.0, 4.0}), b = param({12.0}, DType::f32), c = param({7.0});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});  // c has no gradient and is skipped
  Tensor a_grad = a.grad();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b, c}, 100.0), 13.0);
  EXPECT_EQ(a.grad().at({0}), 3.0);  // under the limit: untouched
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b, c}, 6.5), 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_DOUBLE_EQ(a_grad.at({0}), 3.0 * coef);  // in place: the same gradient tensor
  EXPECT_NEAR(b.grad().at({0}), 12.0 * coef, 1e-6);
  EXPECT_NEAR(optim::grad_norm({a, b, c}), 6.5, 1e-6);
}

TEST(ClipGradNorm, LargeGradientsAccumulateInF64) {
  // 1M f32 elements of 1e-3 in blocks: the f64 sum is exact enough to give sqrt(1e6 * 1e-6) = 1.
  Tensor p = Tensor::empty({1 << 20}, DType::f32);
  p.set_requires_grad(true);
  p.set_grad(full({1 << 20}, 1e-3));
  const double n = optim::grad_norm({p});
  EXPECT_NEAR(n, std::sqrt(double(1 << 20)) * double(float(1e-3)), 1e-12);
}
