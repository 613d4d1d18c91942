// Checkpointed modules replay their dropout draws: a module with dropout gives the same output
// and gradients with and without recomputation, outside and inside a global-row scope, and its
// draw counters end where a plain forward leaves them.
#include <gtest/gtest.h>

#include "trireme/core/rng.h"
#include "trireme/nn/checkpoint.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"

using namespace trireme;

namespace {

class Noisy : public nn::Module {
 public:
  Noisy() : Module("Noisy") {
    fc = register_module("fc", std::make_shared<nn::Linear>(8, 8));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
  }
  Tensor forward(const Tensor& x) { return drop->forward(tanh(fc->forward(x))) + x; }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::Dropout> drop;
};

struct Result {
  std::vector<float> out, grad_x, grad_w;
  std::vector<uint64_t> counters;
};

Result run(bool recompute, std::optional<int64_t> first_row) {
  auto m = std::make_shared<Noisy>();
  nn::init_parameters(*m, 3);
  m->set_rng(11, 4);
  Generator gen(5);
  Tensor x = randn({6, 8}, gen);
  x.set_requires_grad(true);
  std::optional<nn::GlobalRowScope> rows;
  if (first_row) rows.emplace(*first_row);
  Tensor y = recompute ? nn::checkpointed(m, x, [&](const Tensor& in) { return m->forward(in); }) : m->forward(x);
  rows.reset();
  sum(y * y).backward();
  return {y.detach().to_vector<float>(), x.grad().to_vector<float>(), m->fc->weight.grad().to_vector<float>(),
          m->rng_counters()};
}

}  // namespace

TEST(CheckpointedModule, DropoutReplaysItsMasks) {
  for (std::optional<int64_t> row : {std::optional<int64_t>(), std::optional<int64_t>(12)}) {
    const Result plain = run(false, row), again = run(true, row);
    EXPECT_EQ(again.out, plain.out);
    EXPECT_EQ(again.grad_x, plain.grad_x);
    EXPECT_EQ(again.grad_w, plain.grad_w);
    EXPECT_EQ(again.counters, plain.counters);
  }
}

TEST(CheckpointedModule, CountersCanBeReadAndRestored) {
  Noisy m;
  m.set_rng(1, 7);
  std::vector<uint64_t> c = m.rng_counters();
  EXPECT_EQ(c, std::vector<uint64_t>(c.size(), 7u));
  c.back() = 9;
  m.set_rng_counters(c);
  EXPECT_EQ(m.rng_counters(), c);
  EXPECT_THROW(m.set_rng_counters({1}), Error);
}
