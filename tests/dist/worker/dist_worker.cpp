// The worker program the dist tests launch as several processes: one scenario per run, checked
// against closed-form answers (sums of ranks); exits 0 when every check holds.
//   dist_worker collectives | by_device | timeout | peer_dies | die | env | sleep
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <string>
#include <thread>
#include <unistd.h>

#include "worker_check.h"
#include "trireme/core/tensor.h"
#include "trireme/dist/device_mesh.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/process_group_gloo.h"

using namespace trireme;
using namespace trireme::dist;
using namespace std::chrono_literals;

namespace {

template <class T>
Tensor filled(int64_t n, DType dtype, auto value_of) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(value_of(i));
  return t;
}

void expect_values(const Tensor& t, auto expected_of, const char* what) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    double got = t.at({i}), want = expected_of(i);
    EXPECT_TRUE(std::abs(got - want) <= 1e-6 * (1 + std::abs(want)), what, ": element ", i, " is ", got,
                " but should be ", want);
  }
}

// A 1-d tensor of n elements of any dtype, element i = value_of(i).
Tensor filled_as(DType dtype, int64_t n, auto value_of) {
  Tensor t = Tensor::empty({n}, dtype);
  dispatch_dtype(dtype, [&]<class T>() {
    for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(static_cast<float>(value_of(i)));
  });
  return t;
}

// Every op on every dtype, with odd element counts (chunks of 1, 3, 5 and 7 elements). Values
// stay small integers, so bf16/f16 hold them exactly and the answers are closed forms.
void collectives_every_dtype(ProcessGroup& world) {
  const int r = world.rank(), W = world.size();
  const double rank_sum = W * (W - 1) / 2.0;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    std::string name = str_cat(dtype);
    for (int64_t n : {1, 7}) {
      Tensor s = filled_as(dtype, n, [&](int64_t i) { return r + i; });
      world.all_reduce(s)->wait();
      expect_values(s, [&](int64_t i) { return rank_sum + W * i; }, (name + " all_reduce sum").c_str());
      Tensor mx = filled_as(dtype, n, [&](int64_t i) { return r + i; });
      world.all_reduce(mx, {.op = ReduceOp::max})->wait();
      expect_values(mx, [&](int64_t i) { return W - 1 + i; }, (name + " all_reduce max").c_str());
      Tensor mn = filled_as(dtype, n, [&](int64_t i) { return r + i; });
      world.all_reduce(mn, {.op = ReduceOp::min})->wait();
      expect_values(mn, [&](int64_t i) { return i; }, (name + " all_reduce min").c_str());
      Tensor av = filled_as(dtype, n, [&](int64_t i) { return W * r + i; });  // sums divide exactly by W
      world.all_reduce(av, {.op = ReduceOp::avg})->wait();
      expect_values(av, [&](int64_t i) { return W * rank_sum / W + i; }, (name + " all_reduce avg").c_str());
    }
    // all_gather of 5 elements per rank: rank q contributes 10 q + j.
    Tensor in = filled_as(dtype, 5, [&](int64_t j) { return 10 * r + j; });
    Tensor out = Tensor::empty({5 * W}, dtype);
    world.all_gather(out, in)->wait();
    expect_values(out, [&](int64_t k) { return 10 * (k / 5) + k % 5; }, (name + " all_gather").c_str());
    // reduce_scatter into 3 elements per rank, with every op: rank q's element j is q + j.
    Tensor rs_in = filled_as(dtype, 3 * W, [&](int64_t j) { return r + j; });
    Tensor rs_out = Tensor::empty({3}, dtype);
    world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::sum})->wait();
    expect_values(rs_out, [&](int64_t k) { return rank_sum + W * (3.0 * r + k); }, (name + " reduce_scatter sum").c_str());
    world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::min})->wait();
    expect_values(rs_out, [&](int64_t k) { return 3.0 * r + k; }, (name + " reduce_scatter min").c_str());
    world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::max})->wait();
    expect_values(rs_out, [&](int64_t k) { return W - 1 + 3.0 * r + k; }, (name + " reduce_scatter max").c_str());
    // all_to_all with chunks of 3: rank q sends 16 q + 4 j + k as element k of chunk j to rank j.
    Tensor a2a_in = filled_as(dtype, 3 * W, [&](int64_t e) { return 16 * r + 4 * (e / 3) + e % 3; });
    Tensor a2a_out = Tensor::empty({3 * W}, dtype);
    world.all_to_all(a2a_out, a2a_in)->wait();
    expect_values(a2a_out, [&](int64_t e) { return 16 * (e / 3) + 4 * r + e % 3; }, (name + " all_to_all").c_str());
  }
  try {
    world.all_to_all(Tensor::empty({W + 1}, DType::f32), Tensor::empty({W + 1}, DType::f32));
    EXPECT_TRUE(W == 1, "all_to_all with a size not divisible by the group should throw");
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).find("all_to_all") != std::string::npos, e.what());
  }
}

void collectives(ProcessGroup& world) {
  const int r = world.rank(), W = world.size();
  const double rank_sum = W * (W - 1) / 2.0;

  // all_reduce sum / max / avg, several dtypes.
  Tensor a = filled<float>(5, DType::f32, [&](int64_t i) { return r + i; });
  world.all_reduce(a)->wait();
  expect_values(a, [&](int64_t i) { return rank_sum + W * i; }, "all_reduce sum f32");
  Tensor m = filled<int64_t>(3, DType::i64, [&](int64_t i) { return r * 10 - i; });
  world.all_reduce(m, {.op = ReduceOp::max})->wait();
  expect_values(m, [&](int64_t i) { return (W - 1) * 10 - i; }, "all_reduce max i64");
  Tensor v = filled<double>(4, DType::f64, [&](int64_t i) { return r + 0.5 * i; });
  world.all_reduce(v, {.op = ReduceOp::avg})->wait();
  expect_values(v, [&](int64_t i) { return rank_sum / W + 0.5 * i; }, "all_reduce avg f64");
  Tensor b = filled<bf16_t>(4, DType::bf16, [&](int64_t i) { return float(r + i); });
  world.all_reduce(b)->wait();
  expect_values(b, [&](int64_t i) { return rank_sum + W * i; }, "all_reduce sum bf16");

  // Async: two in flight, then waited for in reverse order.
  Tensor x = filled<float>(1000, DType::f32, [&](int64_t) { return r; });
  Tensor y = filled<float>(7, DType::f32, [&](int64_t) { return 1.0; });
  auto wx = world.all_reduce(x);
  auto wy = world.all_reduce(y);
  wy->wait(5000ms);
  wx->wait();
  EXPECT_TRUE(wx->is_completed() && wy->is_completed(), "async works report completion");
  expect_values(x, [&](int64_t) { return rank_sum; }, "async all_reduce x");
  expect_values(y, [&](int64_t) { return W; }, "async all_reduce y");

  // broadcast from the last rank.
  Tensor c = filled<int32_t>(6, DType::i32, [&](int64_t i) { return r * 100 + i; });
  world.broadcast(c, {.root = W - 1})->wait();
  expect_values(c, [&](int64_t i) { return (W - 1) * 100 + i; }, "broadcast");

  // all_gather: rank r contributes {r, 10 r}.
  Tensor in = filled<float>(2, DType::f32, [&](int64_t i) { return i == 0 ? r : 10 * r; });
  Tensor out = Tensor::empty({W * 2}, DType::f32);
  world.all_gather(out, in)->wait();
  expect_values(out, [&](int64_t i) { return i % 2 == 0 ? i / 2 : 10 * (i / 2); }, "all_gather");
  // Note [staged all-gather]: each rank's input through arrived(), the whole output after finish().
  Tensor staged_out = Tensor::empty({W * 2}, DType::f32);
  auto gather = world.all_gather_staged(staged_out, in);
  for (int q = 0; q < W; ++q)
    expect_values(gather->arrived(q), [&](int64_t i) { return i == 0 ? q : 10 * q; }, "staged all_gather arrival");
  gather->finish()->wait();
  expect_values(staged_out, [&](int64_t i) { return i % 2 == 0 ? i / 2 : 10 * (i / 2); }, "staged all_gather");
  auto arrivals_only = world.all_gather_staged(Tensor(), in);
  expect_values(arrivals_only->arrived(W - 1), [&](int64_t i) { return i == 0 ? W - 1 : 10 * (W - 1); },
                "an output-less staged all_gather's arrival");
  Tensor others = Tensor::empty({2 * (W - 1)}, in.dtype());  // the other ranks' inputs, this one's left out
  arrivals_only->keep_others(others);
  arrivals_only->finish()->wait();
  expect_values(others, [&](int64_t i) {
    const int64_t q = i / 2 < r ? i / 2 : i / 2 + 1;
    return i % 2 == 0 ? q : 10 * q;
  }, "staged all_gather's kept rows of the other ranks");

  // reduce_scatter: element j of rank q's input is q + j; rank r keeps elements 3r..3r+2.
  Tensor rs_in = filled<float>(W * 3, DType::f32, [&](int64_t j) { return r + j; });
  Tensor rs_out = Tensor::empty({3}, DType::f32);
  world.reduce_scatter(rs_out, rs_in)->wait();
  expect_values(rs_out, [&](int64_t k) { return rank_sum + W * (3.0 * r + k); }, "reduce_scatter sum");
  world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::max})->wait();
  expect_values(rs_out, [&](int64_t k) { return W - 1 + 3.0 * r + k; }, "reduce_scatter max");
  // Note [staged reduce-scatter]: Gloo cannot send early, so finish() does the whole op.
  auto staged = world.reduce_scatter_staged(rs_out, rs_in, {.op = ReduceOp::sum});
  EXPECT_TRUE(!staged->sends_early(), "gloo's staged reduce_scatter should say it does not send early");
  if (W > 1) staged->chunk_written((r + 1) % W);
  staged->finish()->wait();
  expect_values(rs_out, [&](int64_t k) { return rank_sum + W * (3.0 * r + k); }, "staged reduce_scatter sum");
  // others_sum: only the other ranks' chunks written; their sum comes back, this rank's own chunk
  // (left unwritten: here 1e6, which must not count) adding nothing.
  Tensor os_in = filled<float>(W * 3, DType::f32, [&](int64_t j) { return j / 3 == r ? 1e6 : r + j; });
  Tensor os_out = Tensor::empty({3}, DType::f32);
  auto by_caller = world.reduce_scatter_staged(os_out, os_in, {.op = ReduceOp::sum});
  for (int q = 0; q < W; ++q)
    if (q != r) by_caller->chunk_written(q);
  const Tensor others_sum = by_caller->others_sum();
  by_caller->finish()->wait();
  expect_values(others_sum, [&](int64_t k) { return rank_sum - r + (W - 1) * (3.0 * r + k); },
                "staged reduce_scatter's others_sum");
  auto by_max = world.reduce_scatter_staged(os_out, os_in, {.op = ReduceOp::max});
  try {
    by_max->others_sum();
    EXPECT_TRUE(false, "others_sum of a max reduce_scatter should throw");
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).find("sums only") != std::string::npos, "unexpected error: ", e.what());
  }
  by_max->finish()->wait();

  // send/recv around a ring.
  if (W > 1) {
    Tensor s = filled<float>(4, DType::f32, [&](int64_t i) { return r * 1000 + i; });
    Tensor got = Tensor::empty({4}, DType::f32);
    auto ws = world.send(s, (r + 1) % W, {.tag = 7});
    auto wr = world.recv(got, (r + W - 1) % W, {.tag = 7});
    wr->wait();
    ws->wait();
    int from = (r + W - 1) % W;
    expect_values(got, [&](int64_t i) { return from * 1000 + i; }, "send/recv ring");
  }
  world.barrier()->wait();

  collectives_every_dtype(world);

  // Errors on bad arguments name the op.
  try {
    world.all_gather(Tensor::empty({3}, DType::f32), in);
    EXPECT_TRUE(false, "all_gather with a wrong output size should throw");
  } catch (const Error& e) {
    EXPECT_TRUE(std::string(e.what()).find("all_gather") != std::string::npos, e.what());
  }

  // A mesh over 4 ranks: dp=2 x tp=2; groups sum their members' global ranks.
  if (W == 4) {
    auto world_ptr = std::shared_ptr<ProcessGroup>(&world, [](ProcessGroup*) {});
    DeviceMesh mesh(world_ptr, {{"dp", 2}, {"tp", 2}});
    Tensor t = filled<float>(1, DType::f32, [&](int64_t) { return r; });
    mesh.group("tp")->all_reduce(t)->wait();
    expect_values(t, [&](int64_t) { return 4 * (r / 2) + 1; }, "tp group sum");
    Tensor d = filled<float>(1, DType::f32, [&](int64_t) { return r; });
    mesh.group("dp")->all_reduce(d)->wait();
    expect_values(d, [&](int64_t) { return 2 * (r % 2) + 2; }, "dp group sum");
    EXPECT_TRUE(mesh.coordinate("tp") == r % 2 && mesh.coordinate("dp") == r / 2, "mesh coordinates");
    EXPECT_TRUE(mesh.group("tp")->size() == 2 && mesh.group("tp")->rank() == r % 2, "tp group rank");
    // The rank order from a string: "dp-tp" makes dp the fastest-varying dimension.
    DeviceMesh swapped(world_ptr, "dp=2,tp=2", "dp-tp");
    Tensor u = filled<float>(1, DType::f32, [&](int64_t) { return r; });
    swapped.group("dp")->all_reduce(u)->wait();
    expect_values(u, [&](int64_t) { return 4 * (r / 2) + 1; }, "dp group sum with dp fastest");
    EXPECT_TRUE(swapped.coordinate("dp") == r % 2 && swapped.coordinate("tp") == r / 2, "swapped mesh coordinates");
    EXPECT_TRUE(swapped.group("dp")->backend_name() == world.backend_name(), "mesh groups use the world's backend");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "collectives";
  try {
    DistEnv env = dist_env_from_environment();
    g_rank = env.rank;
    std::printf("pid=%d rank=%d\n", static_cast<int>(::getpid()), env.rank);
    std::fflush(stdout);
    if (scenario == "env") {
      EXPECT_TRUE(env.source == "torchrun", env.source);
      EXPECT_TRUE(std::getenv("OMP_NUM_THREADS") && std::atoi(std::getenv("OMP_NUM_THREADS")) >= 1, "OMP_NUM_THREADS");
      EXPECT_TRUE(!env.token.empty() && env.master_port > 0, "token and port");
      EXPECT_TRUE(env.local_rank == env.rank && env.local_world_size == env.world_size, "one node");
      return 0;
    }
    if (scenario == "sleep") {
      // A grandchild in the same process group: the launcher must take it down too.
      pid_t child = ::fork();
      if (child == 0) {
        ::sleep(60);
        ::_exit(0);
      }
      std::printf("child=%d\n", static_cast<int>(child));
      std::fflush(stdout);
      ::sleep(60);
      return 0;
    }
    auto store = std::make_shared<StoreClient>(store_client_options(env, 10s));
    if (scenario == "by_device") {
      // The group that follows each tensor's device; CPU tensors only here, so NCCL is never made.
      auto by_device = make_process_group("by_device", store, env.rank, env.world_size, {.timeout = 10s});
      EXPECT_TRUE(by_device->backend_name() == "by_device", by_device->backend_name());
      collectives(*by_device);
      std::printf("rank %d: %s ok\n", env.rank, scenario.c_str());
      return 0;
    }
    ProcessGroupGloo world(store, env.rank, env.world_size, GlooOptions{.timeout = 10s});
    if (scenario == "collectives") {
      collectives(world);
    } else if (scenario == "loop") {
      // All-reduces until killed (fault tests stop or kill a rank from outside): "looping" once
      // in the loop; a failed op prints its error and exits 3.
      milliseconds timeout(argc > 2 ? std::atoi(argv[2]) : 10000);
      Tensor x = filled<float>(1024, DType::f32, [](int64_t i) { return double(i); });
      world.barrier()->wait();
      std::printf("looping\n");
      std::fflush(stdout);
      auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; std::chrono::steady_clock::now() - start < 60s; ++i) {
        try {
          world.all_reduce(x, {.op = ReduceOp::avg, .timeout = timeout})->wait();
        } catch (const Error& e) {
          std::printf("error in all_reduce %lld: %s\n", static_cast<long long>(i), e.what());
          std::fflush(stdout);
          ::_exit(3);
        }
      }
    } else if (scenario == "timeout") {
      world.barrier()->wait();
      if (env.rank == 0) {
        Tensor t = filled<float>(3, DType::f32, [](int64_t) { return 1.0; });
        auto start = std::chrono::steady_clock::now();
        try {
          world.all_reduce(t, {.timeout = 300ms})->wait();
          EXPECT_TRUE(false, "all_reduce should have timed out");
        } catch (const Error& e) {
          auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
          std::printf("error after %lld ms: %s\n", static_cast<long long>(ms.count()), e.what());
          EXPECT_TRUE(std::string(e.what()).find("timed out") != std::string::npos, e.what());
          EXPECT_TRUE(std::string(e.what()).find("all_reduce") != std::string::npos, e.what());
          EXPECT_TRUE(ms < 3000ms, "the timeout took ", ms.count(), " ms");
        }
        // Gloo pairs are unusable after a timeout; leave without tearing them down.
        std::fflush(stdout);
        ::_exit(0);
      }
      std::this_thread::sleep_for(1500ms);
      ::_exit(0);
    } else if (scenario == "peer_dies" || scenario == "die") {
      world.barrier()->wait();
      if (env.rank == 1) {
        std::printf("rank 1 going away\n");
        std::fflush(stdout);
        if (scenario == "die") ::raise(SIGKILL);
        ::_exit(0);  // no goodbye to the store: counts as dead (Note [store liveness])
      }
      Tensor t = filled<float>(3, DType::f32, [](int64_t) { return 1.0; });
      auto start = std::chrono::steady_clock::now();
      try {
        world.all_reduce(t, {.timeout = 20s})->wait();
        EXPECT_TRUE(false, "all_reduce with a dead peer should fail");
      } catch (const Error& e) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        std::printf("error after %lld ms: %s\n", static_cast<long long>(ms.count()), e.what());
        std::fflush(stdout);
        if (scenario == "die") ::_exit(3);  // the launcher should still blame rank 1
        EXPECT_TRUE(std::string(e.what()).find("rank 1 exited or was killed") != std::string::npos, e.what());
        EXPECT_TRUE(std::string(e.what()).find("all_reduce") != std::string::npos, e.what());
        EXPECT_TRUE(ms < 5000ms, "noticing the dead peer took ", ms.count(), " ms");
      }
      // Survivors leave normally: the group and the store client close down despite the dead peer.
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    std::printf("rank %d: %s ok\n", env.rank, scenario.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, e.what());
    return 1;
  }
}
