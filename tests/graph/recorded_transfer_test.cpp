// dist::record_transfer: a send or receive inside a traced step becomes two nodes, its post where
// the step posted it and its wait where the step waited, so a replay overlaps the transfer with the
// calls between as the eager step did; dead-code elimination keeps a send although no call reads
// what it produces, and scheduling for memory moves no call across either node. The peer (rank 1, a thread running eagerly) answers the trace and each replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "graph_test_util.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/dist/store.h"
#include "trireme/graph/executable.h"
#include "trireme/graph/passes.h"
#include "trireme/graph/trace.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"

using namespace trireme;
using trireme::testing::bitwise_equal;
using trireme::testing::random_tensor;

TEST(RecordedTransfer, PostAndWaitAreNodesWhereTheStepPutThemAndReplay) {
  NoGradGuard no_grad;
  const std::string token = dist::store_make_token();
  dist::StoreServer server({.token = token});
  auto client = [&](int rank) {
    return std::make_shared<dist::StoreClient>(dist::StoreClientOptions{.port = server.port(), .token = token, .rank = rank});
  };
  const int rounds = 3;  // the trace, then two replays
  std::thread peer([&] {
    try {
      auto g = dist::make_process_group("gloo", client(1), 1, 2, {.timeout = std::chrono::seconds(20)});
      for (int i = 0; i < rounds; ++i) {
        Tensor x = Tensor::empty({4}, DType::f32);
        g->recv(x, 0, {.tag = 1})->wait();
        Tensor y = add(x, 1.0);
        g->send(y, 0, {.tag = 2})->wait();
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "peer: " << e.what();
    }
  });
  auto group = dist::make_process_group("gloo", client(0), 0, 2, {.timeout = std::chrono::seconds(20)});
  graph::StepFn step = [&](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor y = exp(in[0]);
    dist::WorkPtr sent = dist::record_transfer("send", {y}, /*writes=*/false,
                                               [&](Tensor* const* t) { return group->send(*t[0], 1, {.tag = 1}); });
    Tensor z = Tensor::empty({4}, DType::f32);
    dist::WorkPtr got = dist::record_transfer("recv", {z}, /*writes=*/true,
                                              [&](Tensor* const* t) { return group->recv(*t[0], 1, {.tag = 2}); });
    Tensor w = mul(in[0], 3.0);  // while the transfers travel; nothing reads y after its send
    sent->wait();
    got->wait();
    return {add(mul(z, 2.0), w)};
  };
  auto expected = [](const Tensor& x) { return add(mul(add(exp(x), 1.0), 2.0), mul(x, 3.0)); };
  Tensor x1 = random_tensor({4}, 1);
  graph::TraceResult traced = graph::trace(step, {x1});
  EXPECT_TRUE(bitwise_equal(traced.outputs[0], expected(x1)));
  // Scheduling for memory would move the send's wait (the sent buffer's last use) up before the
  // send: a pinned node stays, and no call crosses it.
  graph::Graph g = graph::schedule_for_memory(graph::eliminate_dead_code(traced.graph));
  std::vector<std::string> ops;
  for (const graph::Node& n : g.nodes) ops.push_back(n.op);
  auto at = [&](const std::string& op) { return std::find(ops.begin(), ops.end(), op) - ops.begin(); };
  ASSERT_LT(at("wait_recv"), int64_t(ops.size())) << ::testing::PrintToString(ops);
  EXPECT_LT(at("send"), at("recv"));
  EXPECT_LT(at("recv"), at("mul_scalar"));       // posted before the multiplication, as traced
  EXPECT_LT(at("mul_scalar"), at("wait_send")) << ::testing::PrintToString(ops);  // waited after it
  EXPECT_LT(at("wait_send"), at("wait_recv"));
  graph::Executable exe(g);
  for (int i = 2; i <= rounds; ++i) {
    Tensor x = random_tensor({4}, uint64_t(i));
    EXPECT_TRUE(bitwise_equal(exe.run({x})[0], expected(x))) << "replay " << i - 1;
  }
  peer.join();
}
