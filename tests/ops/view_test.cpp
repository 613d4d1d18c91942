// The view ops whose backward writes into a larger gradient (split, narrow, cat) against finite
// differences in f64 through the op harness, and split's one-buffer backward: a piece that gets
// no gradient contributes zeros, and the gradient of x is one tensor of x's shape.
#include <gtest/gtest.h>

#include "op_harness.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme {
namespace {

using testing::check_op;
using testing::Inputs;

TEST(Views, SplitNarrowCatMatchFiniteDifferences) {
  // Pieces used with different weights, the middle one not at all (its gradient slice is zero).
  check_op({.name = "split_last_dim", .shapes = {{2, 3, 9}}, .fn = [](const Inputs& x) {
              std::vector<Tensor> p = split(x[0], 3, 2);
              return cat({mul(p[0], 2.0), p[2]}, 2);
            }});
  check_op({.name = "split_uneven_dim0", .shapes = {{7, 4}}, .fn = [](const Inputs& x) {
              std::vector<Tensor> p = split(x[0], std::vector<int64_t>{2, 4, 1}, 0);
              return add(mul(p[1], p[1]), sum(p[0] * 3.0) + sum(p[2]));
            }});
  check_op({.name = "chunk", .shapes = {{4, 6}}, .fn = [](const Inputs& x) {
              std::vector<Tensor> p = chunk(x[0], 3, 1);
              return mul(p[0], p[2]) - p[1];
            }});
  check_op({.name = "narrow", .shapes = {{5, 6}}, .fn = [](const Inputs& x) { return narrow(x[0], 1, 2, 3) * 1.5; }});
  check_op({.name = "cat", .shapes = {{2, 3}, {2, 5}}, .fn = [](const Inputs& x) { return cat({x[0], x[1]}, 1); }});
}

TEST(Views, SplitBackwardIsOneBufferWithZerosForUnusedPieces) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {1, 6}).set_requires_grad(true);
  std::vector<Tensor> p = split(x, 2, 1);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[1].to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(p[1].storage().get(), x.storage().get());  // views, no copy
  sum(p[0] * 10.0 + p[2]).backward();
  EXPECT_EQ(x.grad().sizes(), x.sizes());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{10, 10, 0, 0, 1, 1}));
}

}  // namespace
}  // namespace trireme
