// Guards: a graph is replayed only for the input signature it was traced with; another shape
// traces another graph (counted), a known one is picked again, and a shape that changes on every
// call is refused once the cache is full.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/graph/static_function.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

TEST(Guards, ANewShapeRetracesAndIsCountedAKnownOneReplays) {
  NoGradGuard no_grad;
  graph::StaticFunction f([](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {sum(exp(in[0]), {0})}; });
  for (const Shape& s : {Shape{4, 3}, Shape{4, 3}, Shape{2, 3}, Shape{4, 3}, Shape{2, 3}}) {
    Tensor x = random_tensor(s, uint64_t(s[0]) * 7 + uint64_t(f.replays()));
    EXPECT_TRUE(bitwise_equal(f({x})[0], sum(exp(x), {0}))) << x.str();
  }
  EXPECT_EQ(f.traces(), 2);
  EXPECT_EQ(f.retraces(), 1);
  EXPECT_EQ(f.replays(), 3);
  // Another dtype or layout (a transposed view) is another signature too.
  f({to_dtype(random_tensor({4, 3}, 1), DType::f64)});
  f({transpose(random_tensor({3, 4}, 1), 0, 1)});
  EXPECT_EQ(f.traces(), 4);
}

TEST(Guards, AShapeThatChangesEveryCallIsRefused) {
  NoGradGuard no_grad;
  graph::StaticFunction f([](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {exp(in[0])}; },
                          {.max_graphs = 3});
  for (int64_t n = 1; n <= 3; ++n) f({random_tensor({n}, 1)});
  trireme::testing::expect_error([&] { f({random_tensor({4}, 1)}); },
                                 {"changed signature 4 times (limit 3)", "f32 [4]", "pad the last batch"});
}
