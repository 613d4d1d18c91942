// Selective recomputation (autograd::recompute_when_saved): a GEMM that saves a marked GELU or
// layer-norm output keeps its recipe instead, computes it once in the backward, and the gradients
// are those of the plain graph — through autocast's cast too; an input modified in place before
// the backward is refused as for any saved tensor; without grad mode nothing is marked.
#include <gtest/gtest.h>

#include "trireme/autograd/autocast_mode.h"
#include "trireme/autograd/checkpoint.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using autograd::TensorList;

namespace {

Tensor leaf(Shape shape, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  Tensor t = to_dtype(randn(shape, gen), dtype);
  t.set_requires_grad(true);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = contiguous(to_dtype(a, DType::f64)).to_vector<double>(), y = contiguous(to_dtype(b, DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// layer_norm -> linear -> gelu -> linear; `mark` marks the norm's and GELU's outputs.
Tensor net(const Tensor& x, const Tensor& g, const Tensor& b, const Tensor& w1, const Tensor& w2, bool mark, int* calls) {
  Tensor n = layer_norm(x, g, b, 1e-5);
  if (mark) {
    autograd::recompute_when_saved(n, {x, g, b}, [calls](const TensorList& in) {
      ++*calls;
      return TensorList{layer_norm(in[0], in[1], in[2], 1e-5)};
    });
  }
  Tensor u = linear(n, w1);
  Tensor a = gelu(u);
  if (mark) {
    autograd::recompute_when_saved(a, {u}, [calls](const TensorList& in) {
      ++*calls;
      return TensorList{gelu(in[0])};
    });
  }
  return sum(linear(a, w2));
}

}  // namespace

TEST(SelectiveRecompute, SameGradientsEachRecipeRunOnce) {
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = leaf({4, 8}, 1, dtype), g = leaf({8}, 2, dtype), b = leaf({8}, 3, dtype), w1 = leaf({16, 8}, 4, dtype),
           w2 = leaf({8, 16}, 5, dtype);
    std::vector<Tensor> all{x, g, b, w1, w2};
    int calls = 0;
    net(x, g, b, w1, w2, false, &calls).backward();
    std::vector<Tensor> plain;
    for (Tensor& t : all) plain.push_back(clone(t.grad())), t.set_grad(Tensor());
    {
      // Under autocast (f32 inputs) the GEMMs save bf16 casts of the marked tensors.
      autograd::AutocastModeGuard autocast(DeviceType::cpu, {.enabled = dtype == DType::f32, .dtype = DType::bf16});
      Tensor loss = net(x, g, b, w1, w2, true, &calls);
      EXPECT_EQ(calls, 0);
      if (dtype == DType::f32) {
        // Autocast changes the values: compare with the plain graph under autocast instead.
        for (Tensor& t : all) t.set_grad(Tensor());
        int none = 0;
        net(x, g, b, w1, w2, false, &none).backward();
        plain.clear();
        for (Tensor& t : all) plain.push_back(clone(t.grad())), t.set_grad(Tensor());
      }
      loss.backward();
    }
    EXPECT_EQ(calls, 2);
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(max_abs_diff(all[i].grad(), plain[i]), 0.0) << "input " << i;
  }
}

TEST(SelectiveRecompute, AnInputModifiedBeforeTheBackwardIsRefused) {
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  Tensor u = x * 1.0;
  Tensor a = gelu(u);
  autograd::recompute_when_saved(a, {u}, [](const TensorList& in) { return TensorList{gelu(in[0])}; });
  Tensor loss = sum(linear(a, w));
  {
    NoGradGuard no_grad;
    add_(u, 1.0);
  }
  EXPECT_THROW(loss.backward(), Error);
}

TEST(SelectiveRecompute, WithoutGradModeNothingIsMarked) {
  Tensor u = leaf({4, 8}, 1);
  NoGradGuard no_grad;
  Tensor a = gelu(u);
  autograd::recompute_when_saved(a, {u}, [](const TensorList& in) { return TensorList{gelu(in[0])}; });
  EXPECT_FALSE(autograd::recompute_recipe(a));
}
