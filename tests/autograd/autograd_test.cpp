// The autograd engine: converging paths, saved-tensor versions, retain_graph, no-grad, detach,
// explicit output gradients, and grad-ready hooks in reverse order of use.
#include <gtest/gtest.h>

#include "counting_tape.h"

#include "trireme/autograd/engine.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;

namespace {
Tensor leaf(std::vector<double> v) {
  Tensor t = from_vector<double>(v, {int64_t(v.size())});
  t.set_requires_grad(true);
  return t;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Autograd, GradientsSumWherePathsMeet) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * x + x * 3.0 + exp(x) * 0.0;  // three paths from x
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));  // 2x + 3
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2});
  sum(x * 2.0).backward();
  sum(x * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 5}));
}

TEST(Autograd, SavedTensorModifiedInPlaceIsRefused) {
  Tensor x = leaf({1, 2, 3});
  Tensor w = from_vector<double>({4, 5, 6}, {3});  // no grad: in-place is allowed
  Tensor y = sum(x * w);                           // mul saves w
  add_(w, 1.0);
  std::string msg = error_of([&] { y.backward(); });
  EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version 0 -> 1"), std::string::npos) << msg;
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradIsRefused) {
  Tensor x = leaf({1, 2});
  std::string msg = error_of([&] { add_(x, 1.0); });
  EXPECT_NE(msg.find("requires grad"), std::string::npos) << msg;
  NoGradGuard ng;
  add_(x, 1.0);  // fine without grad mode (an optimizer step)
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{2, 3}));
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first retained the graph
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 8}));
  std::string msg = error_of([&] { y.backward(); });
  EXPECT_NE(msg.find("second time"), std::string::npos) << msg;
}

TEST(Autograd, NoGradAndDetachRecordNothing) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard ng;
    EXPECT_FALSE((x * 2.0).requires_grad());
  }
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), x.storage());
  EXPECT_FALSE((d * 2.0).requires_grad());
  std::string msg = error_of([&] { sum(d * 2.0).backward(); });
  EXPECT_NE(msg.find("does not require grad"), std::string::npos) << msg;
}

TEST(Autograd, ExplicitOutputGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  std::string msg = error_of([&] { y.backward(); });
  EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;
  y.backward(from_vector<double>({1, 10, 100}, {3}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 20, 200}));
}

TEST(Autograd, GradReadyHooksFireOnceInReverseOrderOfUse) {
  // Three "layers" used in order a, b, c: their gradients are ready in order c, b, a, which is
  // what lets data-parallel reduction of late layers start while early layers still run backward.
  Tensor a = leaf({1, 1}), b = leaf({2, 2}), c = leaf({3, 3});
  std::vector<std::string> order;
  a.register_grad_ready_hook([&](Tensor& g) { order.push_back("a"); });
  b.register_grad_ready_hook([&](Tensor& g) { order.push_back("b"); });
  std::vector<double> grad_c_at_hook;
  c.register_grad_ready_hook([&](Tensor& g) {
    order.push_back("c");
    grad_c_at_hook = g.to_vector<double>();
  });
  Tensor h = tanh(a * 0.1);
  h = tanh(h * b);
  const std::vector<double> hv = h.to_vector<double>();
  h = h * c + h * c;  // c used twice: its hook still fires once, after both contributions
  sum(h).backward();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order, (std::vector<std::string>{"c", "b", "a"}));
  // The hook saw the complete gradient of c: both uses summed, d/dc (2 h c) = 2 h.
  EXPECT_EQ(grad_c_at_hook, (std::vector<double>{2 * hv[0], 2 * hv[1]}));
}

TEST(Autograd, MultipleRootsAndUnusedInputs) {
  Tensor x = leaf({1, 2}), unused = leaf({5});
  Tensor y1 = sum(x * 2.0), y2 = sum(x * x);
  autograd::backward({y1, y2});
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 6}));
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Autograd, ViewsBackpropagateThroughTheirBase) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  x.set_requires_grad(true);
  Tensor y = sum(transpose(slice(x, 1, 1, 3), 0, 1) * 2.0);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 2, 0, 2, 2}));
}

TEST(Autograd, ALeafKeepsAGradientNothingElseHoldsAndCopiesAShared) {
  // mul's backward makes a fresh gradient: it becomes x.grad as it is, with no copy.
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  {
    trireme::testing::CountingTape tape;
    y.backward(from_vector<double>({1, 1, 1}, {3}));
    EXPECT_EQ(tape.calls["copy"], 0);
    EXPECT_EQ(tape.calls["mul_scalar"], 1);
  }
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2, 2}));

  // add's backward hands one tensor to both inputs: each leaf gets a copy of its own.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  sum(a + b).backward();
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  autograd::NoGradGuard no_grad;
  Tensor grad_a = a.grad();
  mul_(grad_a, 5.0);
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));

  // An output gradient the caller passed stays the caller's.
  Tensor c = leaf({1, 2});
  Tensor given = from_vector<double>({7, 8}, {2});
  c.backward(given);
  EXPECT_NE(c.grad().storage(), given.storage());
}
