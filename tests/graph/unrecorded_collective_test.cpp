// A collective issued inside a traced step that is not one of its nodes (not through
// dist::record_collective) fails the trace by name: a replay would skip it. The recorded form
// traces and replays.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/dist/store.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/elementwise.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

TEST(UnrecordedCollective, IsRefusedByNameAndTheRecordedOneReplays) {
  NoGradGuard no_grad;
  const std::string token = dist::store_make_token();
  dist::StoreServer server({.token = token});
  auto store = std::make_shared<dist::StoreClient>(dist::StoreClientOptions{.port = server.port(), .token = token, .rank = 0});
  auto group = dist::make_process_group("gloo", store, 0, 1, {.timeout = std::chrono::seconds(10)});
  graph::StepFn unrecorded = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor y = exp(in[0]);
    group->all_reduce(y)->wait();
    return {y};
  };
  trireme::testing::expect_error([&] { graph::trace(unrecorded, {random_tensor({4}, 1)}); },
                                 {"gloo all_reduce", "not recorded in the traced step", "a replay would skip it"});
  graph::StepFn recorded = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor y = exp(in[0]);
    dist::record_collective("all_reduce", {y}, [&](Tensor* const* t) { return group->all_reduce(*t[0]); })->wait();
    return {mul(y, 2.0)};
  };
  graph::Graph g = graph::trace(recorded, {random_tensor({4}, 1)}).graph;
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[1].op, "all_reduce");
  Tensor x = random_tensor({4}, 2);
  EXPECT_TRUE(bitwise_equal(graph::Executable(g).run({x})[0], recorded({x})[0]));
}
