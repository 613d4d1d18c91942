// sum_squares through the op harness (a naive f64 reference and finite differences), and its
// CPU kernel's independence from the thread count.
#include <gtest/gtest.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "op_harness.h"
#include "trireme/core/rng.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"

using namespace trireme;
using namespace trireme::testing;

namespace {

Tensor naive_sum_squares(const Tensor& x) {
  double total = 0.0;
  for (double v : to_dtype(x, DType::f64).to_vector<double>()) total += v * v;
  return full({}, total, DType::f64);
}

}  // namespace

TEST(SumSquares, AgainstLoopsAndFiniteDifferences) {
  for (const Shape& shape : {Shape{3, 5, 7}, Shape{1}}) {
    check_op({.name = "sum_squares " + str_cat(shape),
              .shapes = {shape},
              .fn = [](const Inputs& x) { return sum_squares(x[0]); },
              .reference = [](const Inputs& x) { return naive_sum_squares(x[0]); }});
  }
  EXPECT_EQ(sum_squares(zeros({2, 0})).item(), 0.0);
}

// Blocks of 2^16 elements summed by any thread, then in order: every thread count gives the same
// bits, which are the f64 sum of the squares (exact squares of f32 elements) to rounding.
TEST(SumSquares, ManyBlocksGiveTheSameBitsOnAnyThreadCount) {
  Generator gen(11);
  Tensor x = randn({5 * 65536 + 123}, gen);
  const double want = naive_sum_squares(x).item();
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  std::vector<double> got;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    got.push_back(sum_squares(x).item());
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
#endif
  EXPECT_NEAR(sum_squares(x).item(), want, 1e-12 * want);
  EXPECT_EQ(sum_squares(x).dtype(), DType::f64);
}
