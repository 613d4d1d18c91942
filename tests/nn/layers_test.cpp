// Layers: dropout train vs eval and its reproducibility, layout-independent init, shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/nn/attention.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/init.h"
#include "trireme/nn/linear.h"
#include "trireme/nn/layer_list.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;

TEST(Dropout, TrainZeroesAndScalesEvalIsIdentity) {
  nn::Dropout drop(0.25);
  Tensor x = ones({64, 64});
  Tensor y = drop.forward(x);
  auto v = y.to_vector<float>();
  int64_t zeros = 0;
  for (float e : v) {
    EXPECT_TRUE(e == 0.0f || std::abs(e - 1.0f / 0.75f) < 1e-6) << e;
    zeros += e == 0.0f;
  }
  EXPECT_NEAR(double(zeros) / double(v.size()), 0.25, 0.03);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).same(x));
}

TEST(Dropout, MasksDependOnSeedNameAndCallOnly) {
  auto make = [] {
    auto list = std::make_shared<nn::LayerList>();
    list->push_back(std::make_shared<nn::Dropout>(0.5));
    list->push_back(std::make_shared<nn::Dropout>(0.5));
    return list;
  };
  auto a = make(), b = make();
  a->set_rng(11, 5);
  b->set_rng(11, 5);
  auto da = a->as<nn::Dropout>(), db = b->as<nn::Dropout>();
  Tensor x = ones({256});
  Tensor a0 = da[0]->forward(x), a1 = da[1]->forward(x), a0_next = da[0]->forward(x);
  Tensor b1 = db[1]->forward(x);  // another order of calls across layers: same masks
  Tensor b0 = db[0]->forward(x);
  EXPECT_EQ(a0.to_vector<float>(), b0.to_vector<float>());
  EXPECT_EQ(a1.to_vector<float>(), b1.to_vector<float>());
  EXPECT_NE(a0.to_vector<float>(), a1.to_vector<float>());       // layers differ (names "0", "1")
  EXPECT_NE(a0.to_vector<float>(), a0_next.to_vector<float>());  // successive calls differ
  b->set_rng(12, 5);
  EXPECT_NE(db[0]->forward(x).to_vector<float>(), a0.to_vector<float>());
}

TEST(Init, ASliceInitialisedAloneEqualsTheSliceOfTheWhole) {
  const std::string name = "transformer.h.3.attn.c_attn.weight";
  Tensor whole = Tensor::empty({12, 10}, DType::f32);
  nn::init_normal(whole, 0.02, 42, name);
  // Row shard (tensor parallel over outputs) and a 2-D block.
  Tensor rows = Tensor::empty({4, 10}, DType::f32);
  nn::init_normal(rows, 0.02, 42, name, {12, 10}, {8, 0});
  EXPECT_EQ(rows.to_vector<float>(), narrow(whole, 0, 8, 4).to_vector<float>());
  Tensor block = Tensor::empty({3, 5}, DType::f32);
  nn::init_normal(block, 0.02, 42, name, {12, 10}, {2, 5});
  EXPECT_EQ(block.to_vector<float>(), narrow(narrow(whole, 0, 2, 3), 1, 5, 5).to_vector<float>());
  // A non-contiguous destination (a column slice of a bigger buffer) gets the same values.
  Tensor buffer = zeros({12, 20});
  Tensor cols = narrow(buffer, 1, 0, 10);
  nn::init_normal(cols, 0.02, 42, name);
  EXPECT_EQ(cols.to_vector<float>(), whole.to_vector<float>());
  // The value depends on the name and seed.
  Tensor other = Tensor::empty({12, 10}, DType::f32);
  nn::init_normal(other, 0.02, 42, "transformer.h.2.attn.c_attn.weight");
  EXPECT_NE(other.to_vector<float>(), whole.to_vector<float>());
  // Statistics are those asked for.
  Tensor big = Tensor::empty({200, 200}, DType::f32);
  nn::init_normal(big, 0.5, 1, "big", {}, {}, 3.0);
  EXPECT_NEAR(mean(big).item(), 3.0, 0.01);
  EXPECT_NEAR(std::sqrt(var(big).item()), 0.5, 0.01);
  Tensor u = Tensor::empty({200, 200}, DType::f32);
  nn::init_uniform(u, -2.0, 2.0, 1, "u");
  EXPECT_GE(-max(neg(u)).item(), -2.0);
  EXPECT_LT(max(u).item(), 2.0);
}

TEST(Init, ShardOutsideTheFullShapeIsAnError) {
  Tensor t = Tensor::empty({4, 4}, DType::f32);
  EXPECT_THROW(nn::init_normal(t, 1.0, 0, "w", {6, 4}, {3, 0}), Error);
  EXPECT_THROW(nn::init_normal(t, 1.0, 0, "w", {6}, {0}), Error);
}

TEST(Init, LayerDefaultsAreKeyedByQualifiedName) {
  auto list = std::make_shared<nn::LayerList>();
  auto l0 = list->push_back(std::make_shared<nn::Linear>(6, 5));
  auto l1 = list->push_back(std::make_shared<nn::Linear>(6, 5));
  nn::init_parameters(*list, 9);
  EXPECT_NE(l0->weight.to_vector<float>(), l1->weight.to_vector<float>());
  Tensor expected = Tensor::empty({5, 6}, DType::f32);
  nn::init_uniform(expected, -1 / std::sqrt(6.0), 1 / std::sqrt(6.0), 9, "1.weight");
  EXPECT_EQ(l1->weight.to_vector<float>(), expected.to_vector<float>());
}

TEST(Attention, ShapesAndCausality) {
  nn::MultiHeadAttention attn({.d_model = 8, .n_head = 2});
  nn::init_parameters(attn, 1);
  Generator g(0);
  Tensor x = randn({2, 5, 8}, g);
  Tensor y = attn.forward(x);
  EXPECT_EQ(y.sizes(), (Shape{2, 5, 8}));
  // Changing the last position must not change earlier outputs.
  Tensor x2 = clone(x);
  {
    NoGradGuard no_grad;
    Tensor last = narrow(x2, 1, 4, 1);
    fill_(last, 3.0);
  }
  Tensor y2 = attn.forward(x2);
  auto max_diff = [](const Tensor& a, const Tensor& b) { return max(abs(a - b)).item(); };
  EXPECT_LE(max_diff(narrow(y, 1, 0, 4), narrow(y2, 1, 0, 4)), 1e-6);
  EXPECT_GT(max_diff(narrow(y, 1, 4, 1), narrow(y2, 1, 4, 1)), 1e-3);
  EXPECT_THROW(nn::MultiHeadAttention({.d_model = 8, .n_head = 3}), Error);
}
