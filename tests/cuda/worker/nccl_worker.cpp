// The worker program the NCCL tests launch as one process per GPU: one scenario per run, checked
// against closed-form answers (sums of ranks); exits 0 when every check holds.
//   nccl_worker collectives | peer_all_reduce | p2p_alone | p2p_queued | timeout | peer_dies | die | throws
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "worker_check.h"
#include "trireme/core/tensor.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/device_mesh.h"
#include "trireme/dist/env.h"
#include "trireme/dist/process_group_by_device.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/dist/process_group_nccl.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"

using namespace trireme;
using namespace trireme::dist;
using namespace std::chrono_literals;

namespace {

Device g_device;

// A tensor on this rank's GPU with element i = value_of(i).
Tensor on_gpu(int64_t n, DType dtype, auto value_of) {
  Tensor t = Tensor::empty({n}, DType::f64);
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = double(value_of(i));
  return to_device(to_dtype(t, dtype), g_device);
}

std::vector<double> values_of(const Tensor& t) {
  Tensor c = contiguous(to_dtype(to_device(t, Device::cpu()), DType::f64));
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

void expect_values(const Tensor& t, auto expected_of, const std::string& what) {
  std::vector<double> got = values_of(t);
  for (size_t i = 0; i < got.size(); ++i) {
    double want = expected_of(int64_t(i));
    EXPECT_TRUE(std::abs(got[i] - want) <= 1e-6 * (1 + std::abs(want)), what, ": element ", i, " is ", got[i],
                " but should be ", want);
  }
}

bool is_integer(DType d) { return d == DType::i32 || d == DType::i64; }

// avg over W ranks of values summing to s: integers divide rounding toward zero (all are >= 0 here).
double average(double s, int W, DType d) { return is_integer(d) ? std::trunc(s / W) : s / W; }

std::string what_of(const std::exception& e) { return e.what(); }

template <class Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts, const std::string& what) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("%s: error as expected: %s\n", what.c_str(), e.what());
    std::fflush(stdout);
    for (const auto& p : parts)
      EXPECT_TRUE(std::string(e.what()).find(p) != std::string::npos, what, ": error lacks '", p, "': ", e.what());
    return;
  }
  EXPECT_TRUE(false, what, ": should have thrown");
}

void collectives_of(ProcessGroupNccl& world, DType d) {
  const int r = world.rank(), W = world.size();
  const double rank_sum = W * (W - 1) / 2.0;
  const std::string name = str_cat(d);
  const int64_t n = 8;

  Tensor a = on_gpu(n, d, [&](int64_t i) { return r + i; });
  world.all_reduce(a)->wait();
  expect_values(a, [&](int64_t i) { return rank_sum + W * i; }, "all_reduce sum " + name);

  Tensor v = on_gpu(n, d, [&](int64_t i) { return r + i; });
  world.all_reduce(v, {.op = ReduceOp::avg})->wait();
  expect_values(v, [&](int64_t i) { return average(rank_sum + W * i, W, d); }, "all_reduce avg " + name);

  Tensor m = on_gpu(n, d, [&](int64_t i) { return r * 10 - i; });
  world.all_reduce(m, {.op = ReduceOp::max})->wait(10s);
  expect_values(m, [&](int64_t i) { return (W - 1) * 10 - i; }, "all_reduce max " + name);

  Tensor mn = on_gpu(n, d, [&](int64_t i) { return r * 10 - i; });
  world.all_reduce(mn, {.op = ReduceOp::min})->wait();
  expect_values(mn, [&](int64_t i) { return -i; }, "all_reduce min " + name);

  // all_to_all, chunks of 3 (odd): rank q sends 16 q + 4 j + k as element k of chunk j to rank j.
  Tensor a2a_in = on_gpu(3 * W, d, [&](int64_t e) { return 16 * r + 4 * (e / 3) + e % 3; });
  Tensor a2a_out = to_device(Tensor::empty({3 * W}, d), g_device);
  world.all_to_all(a2a_out, a2a_in)->wait();
  expect_values(a2a_out, [&](int64_t e) { return 16 * (e / 3) + 4 * r + e % 3; }, "all_to_all " + name);

  Tensor c = on_gpu(n, d, [&](int64_t i) { return r * 100 + i; });
  world.broadcast(c, {.root = W - 1})->wait();
  expect_values(c, [&](int64_t i) { return (W - 1) * 100 + i; }, "broadcast " + name);

  Tensor in = on_gpu(2, d, [&](int64_t i) { return i == 0 ? r : 10 * r + 1; });
  Tensor out = to_device(Tensor::empty({W * 2}, d), g_device);
  world.all_gather(out, in)->wait();
  expect_values(out, [&](int64_t i) { return i % 2 == 0 ? i / 2 : 10 * (i / 2) + 1; }, "all_gather " + name);

  // Element j of rank q's input is q + j; rank r keeps elements 3r..3r+2.
  Tensor rs_in = on_gpu(W * 3, d, [&](int64_t j) { return r + j; });
  Tensor rs_out = to_device(Tensor::empty({3}, d), g_device);
  world.reduce_scatter(rs_out, rs_in)->wait();
  expect_values(rs_out, [&](int64_t k) { return rank_sum + W * (3.0 * r + k); }, "reduce_scatter sum " + name);
  world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::avg})->wait();
  expect_values(rs_out, [&](int64_t k) { return average(rank_sum + W * (3.0 * r + k), W, d); },
                "reduce_scatter avg " + name);
  world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::max})->wait();
  expect_values(rs_out, [&](int64_t k) { return W - 1 + 3.0 * r + k; }, "reduce_scatter max " + name);
  world.reduce_scatter(rs_out, rs_in, {.op = ReduceOp::min})->wait();
  expect_values(rs_out, [&](int64_t k) { return 3.0 * r + k; }, "reduce_scatter min " + name);

  // send/recv around the ring: each rank sends, then receives (Note [nccl send/recv]).
  Tensor s = on_gpu(4, d, [&](int64_t i) { return r * 100 + i; });
  Tensor got = to_device(Tensor::empty({4}, d), g_device);
  auto ws = world.send(s, (r + 1) % W, {.tag = 7});
  auto wr = world.recv(got, (r + W - 1) % W, {.tag = 7});
  wr->wait();
  ws->wait(10s);
  int from = (r + W - 1) % W;
  expect_values(got, [&](int64_t i) { return from * 100 + i; }, "send/recv ring " + name);
}

void collectives(ProcessGroupNccl& world, std::shared_ptr<StoreClient> store) {
  const int r = world.rank(), W = world.size();
  const double rank_sum = W * (W - 1) / 2.0;
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  EXPECT_TRUE(nvls && std::string(nvls) == "0", "NCCL_NVLS_ENABLE should be 0 in the workers");

  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) collectives_of(world, d);

  // Async: two in flight, waited for in reverse order (one blocking the host, one the stream).
  Tensor x = on_gpu(1 << 20, DType::f32, [&](int64_t) { return r; });
  Tensor y = on_gpu(7, DType::f32, [&](int64_t) { return 1.0; });
  auto wx = world.all_reduce(x);
  auto wy = world.all_reduce(y);
  wy->wait(10s);
  EXPECT_TRUE(wy->is_completed(), "wait(timeout) returns once the op is done");
  wx->wait();
  cuda::synchronize();
  EXPECT_TRUE(wx->is_completed(), "done after the device is synchronized");
  expect_values(y, [&](int64_t) { return W; }, "async all_reduce y");
  expect_values(x, [&](int64_t) { return rank_sum; }, "async all_reduce x");

  // Stream order, no host sync in between: compute -> all_reduce -> compute.
  Tensor big = on_gpu(1 << 22, DType::f32, [&](int64_t) { return r; });
  mul_(big, 3.0);
  auto wb = world.all_reduce(big);
  wb->wait();
  add_(big, 1.0);
  expect_values(big, [&](int64_t) { return 3 * rank_sum + 1; }, "compute/all_reduce/compute in stream order");

  // A dropped Work and tensor: the group keeps the tensor alive until the op is done.
  world.all_reduce(on_gpu(1 << 16, DType::f32, [&](int64_t) { return 1.0; }));
  world.barrier()->wait(10s);
  world.barrier()->wait();

  // Bad arguments: errors that name the op.
  expect_error([&] { world.all_reduce(Tensor::empty({3}, DType::f32)); }, {"nccl all_reduce", "cpu", "gloo"},
               "a CPU tensor");
  expect_error([&] { world.all_gather(to_device(Tensor::empty({3}, DType::f32), g_device), on_gpu(2, DType::f32, [](int64_t) { return 0; })); },
               {"all_gather", "elements"}, "all_gather with a wrong output size");
  expect_error([&] { world.all_reduce(to_device(Tensor::empty({3}, DType::boolean), g_device)); }, {"bool"},
               "a bool all_reduce");
  expect_error([&] { world.send(y, r); }, {"send", "another rank"}, "a send to oneself");

  // A group with the ranks reversed: its rank 0 is the last global rank.
  std::vector<int> reversed;
  for (int q = W - 1; q >= 0; --q) reversed.push_back(q);
  auto rev = world.new_group(reversed, "reversed");
  EXPECT_TRUE(rev->rank() == W - 1 - r && rev->size() == W && rev->backend_name() == "nccl", "reversed group ranks");
  Tensor g = on_gpu(1, DType::f32, [&](int64_t) { return r * 5; });
  rev->broadcast(g, {.root = 0})->wait();
  expect_values(g, [&](int64_t) { return (W - 1) * 5; }, "broadcast from the reversed group's rank 0");
  rev->all_reduce(g, {.op = ReduceOp::sum})->wait();
  expect_values(g, [&](int64_t) { return W * (W - 1) * 5; }, "all_reduce on the reversed group");

  // A one-rank group of each rank, and a mesh whose groups are NCCL groups.
  auto solo = world.new_group({r}, "solo");
  Tensor h = on_gpu(3, DType::f32, [&](int64_t i) { return r + i; });
  solo->all_reduce(h)->wait();
  expect_values(h, [&](int64_t i) { return r + i; }, "all_reduce on a one-rank group");
  auto world_ptr = std::shared_ptr<ProcessGroup>(&world, [](ProcessGroup*) {});
  DeviceMesh mesh(world_ptr, {{"dp", 1}, {"tp", W}});
  Tensor t = on_gpu(1, DType::f32, [&](int64_t) { return r; });
  mesh.group("tp")->all_reduce(t)->wait();
  expect_values(t, [&](int64_t) { return rank_sum; }, "tp group of a mesh");

  // The factory: auto picks NCCL here; gloo still serves CPU tensors beside it.
  EXPECT_TRUE(resolve_backend("auto") == "nccl", "auto backend with NCCL and GPUs");
  auto by_factory = make_process_group("auto", store, r, W, {.timeout = 20s});
  EXPECT_TRUE(by_factory->backend_name() == "nccl", by_factory->backend_name());
  Tensor f = on_gpu(2, DType::bf16, [&](int64_t i) { return r + i; });
  by_factory->all_reduce(f)->wait();
  expect_values(f, [&](int64_t i) { return rank_sum + W * i; }, "all_reduce on the factory's nccl group");
  auto cpu_group = make_process_group("gloo", store, r, W, {.timeout = 20s});
  Tensor cpu = Tensor::empty({2}, DType::f32);
  cpu.data<float>()[0] = float(r);
  cpu.data<float>()[1] = 1;
  cpu_group->all_reduce(cpu)->wait();
  EXPECT_TRUE(cpu.data<float>()[0] == rank_sum && cpu.data<float>()[1] == W, "gloo beside nccl");

  // One group for both: CPU tensors through Gloo, CUDA tensors through NCCL (made on the first).
  auto both = make_process_group("by_device", store, r, W, {.timeout = 20s});
  auto both_ptr = std::static_pointer_cast<ProcessGroupByDevice>(both);
  Tensor host = Tensor::empty({1}, DType::f32);
  host.data<float>()[0] = float(r);
  both->all_reduce(host)->wait();
  EXPECT_TRUE(host.data<float>()[0] == rank_sum && !both_ptr->nccl_if_made(), "by_device: CPU via gloo, no nccl yet");
  Tensor dev = on_gpu(3, DType::bf16, [&](int64_t i) { return r + i; });
  both->all_reduce(dev)->wait();
  expect_values(dev, [&](int64_t i) { return rank_sum + W * i; }, "by_device: CUDA via nccl");
  EXPECT_TRUE(both_ptr->nccl_if_made() && both_ptr->nccl_if_made()->backend_name() == "nccl", "by_device made nccl");
  DeviceMesh both_mesh(both, "dp=1,tp=" + std::to_string(W));
  Tensor tg = on_gpu(1, DType::f32, [&](int64_t) { return r; });
  both_mesh.group("tp")->all_reduce(tg)->wait();
  expect_values(tg, [&](int64_t) { return rank_sum; }, "by_device mesh: CUDA tensor");
  Tensor tc = Tensor::empty({1}, DType::f32);
  tc.data<float>()[0] = float(r);
  both_mesh.group("tp")->all_reduce(tc, {.op = ReduceOp::min})->wait();
  EXPECT_TRUE(tc.data<float>()[0] == 0, "by_device mesh: CPU tensor");
  expect_error([&] { both->all_gather(to_device(Tensor::empty({2 * W}, DType::f32), g_device), Tensor::empty({2}, DType::f32)); },
               {"all_gather", "same device"}, "by_device: mixed devices");
  world.barrier()->wait(10s);
}

// Note [nccl send/recv]: rank 0 posts sends a and b and a recv c; rank 1 receives a, then b, and
// only then sends c. With `alone` every transfer starts in its own group and all arrive. Queued,
// rank 0's three start as one group, where NCCL pairs a with c and runs b after that pair: b
// waits for c, c for b, and both ranks' waits time out (what the pipelines hit on GPUs).
void p2p_order(ProcessGroupNccl& world, StoreClient& store, bool alone) {
  const int r = world.rank();
  {  // connect both directions first, in one group on both ranks, as PipelineExecutor does
    Tensor out = on_gpu(1, DType::f32, [](int64_t) { return 0; }), in = on_gpu(1, DType::f32, [](int64_t) { return 0; });
    auto s = world.send(out, 1 - r), v = world.recv(in, 1 - r);
    s->wait(10s);
    v->wait(10s);
  }
  const SendRecvOptions o{.alone = alone};
  const auto value = [](int which) { return [which](int64_t i) { return 100.0 * which + double(i); }; };
  const milliseconds limit = alone ? milliseconds(10s) : milliseconds(3s);
  if (r == 0) {
    Tensor a = on_gpu(1000, DType::f32, value(1)), b = on_gpu(1000, DType::f32, value(2));
    Tensor c = on_gpu(1000, DType::f32, [](int64_t) { return -1.0; });
    auto sa = world.send(a, 1, o), sb = world.send(b, 1, o), rc = world.recv(c, 1, o);
    if (!alone) {
      expect_error([&] { rc->wait(limit); }, {"recv(from rank 1"}, "rank 0's recv c, queued behind send b");
      store.get("p2p_queued_rank1_done", 30s);  // stay until rank 1 has seen its own timeout
      return;
    }
    rc->wait(limit);
    sa->wait(limit);
    sb->wait(limit);
    expect_values(c, value(3), "c on rank 0");
  } else {
    Tensor a = on_gpu(1000, DType::f32, [](int64_t) { return -1.0; }), b = on_gpu(1000, DType::f32, [](int64_t) { return -1.0; });
    world.recv(a, 0, o)->wait(limit);
    expect_values(a, value(1), "a on rank 1");
    if (!alone) {
      expect_error([&] { world.recv(b, 0, o)->wait(limit); }, {"recv(from rank 0"},
                   "rank 1's recv b, whose send waits for rank 0's recv c");
      store.set("p2p_queued_rank1_done", "1");
      return;
    }
    world.recv(b, 0, o)->wait(limit);
    expect_values(b, value(2), "b on rank 1");
    Tensor c = on_gpu(1000, DType::f32, value(3));
    world.send(c, 0, o)->wait(limit);
  }
}

}  // namespace

// Note [peer all-reduce]: the copy-engine path gives the bits NCCL gives, for every floating
// dtype, sum and avg, sizes from 1 element to several pieces of the staging slots, unaligned
// views, and many ops queued back to back (the staging parities and the consumed waits).
void peer_all_reduce(ProcessGroupNccl& world, const std::shared_ptr<StoreClient>& store) {
  const int r = world.rank();
  EXPECT_TRUE(world.uses_peer_all_reduce(), "2 GPUs of one host should use the peer all-reduce: ",
              world.peer_all_reduce_why_not());
  EXPECT_TRUE(world.uses_peer_rs_ag(), "reduce-scatter and all-gather take the copy engines with the all-reduce");
  // 1 MiB staging slots, so that the large cases below go in several pieces.
  auto peer = std::make_shared<ProcessGroupNccl>(
      store, r, std::vector<int>{0, 1},
      NcclOptions{.timeout = 20s, .prefix = "test/small_slots/", .peer_slot_bytes = int64_t(1) << 20});
  EXPECT_TRUE(peer->uses_peer_all_reduce() && peer->uses_peer_rs_ag(), "the second group should use it for all three");
  auto nccl_group = std::make_shared<ProcessGroupNccl>(
      store, r, std::vector<int>{0, 1},
      NcclOptions{.timeout = 20s, .prefix = "test/nccl_only/", .peer_all_reduce = PeerAllReduceMode::off});
  EXPECT_TRUE(!nccl_group->uses_peer_all_reduce(), "peer_all_reduce = off should turn it off");
  // Groups made from it inherit the mode.
  EXPECT_TRUE(!dynamic_cast<ProcessGroupNccl&>(*nccl_group->new_group({0, 1}, "child")).uses_peer_all_reduce(),
              "a group made with new_group should inherit peer_all_reduce = off");
  std::shared_ptr<ProcessGroup> nccl = nccl_group;
  // Values that make rounding visible: a sum in the wrong order or precision changes bits.
  auto value = [&](int64_t i) { return std::sin(double(i) * 0.37 + r) * (1 + (i % 7)) + 1e-3 * r; };
  struct Case {
    int64_t n;
    DType d;
    ReduceOp op;
    int64_t offset;  // elements into a larger tensor: unaligned when odd
  };
  std::vector<Case> cases = {{1, DType::f32, ReduceOp::sum, 0},         {7, DType::bf16, ReduceOp::sum, 0},
                             {1000, DType::f16, ReduceOp::avg, 0},      {4099, DType::f64, ReduceOp::sum, 1},
                             {4099, DType::bf16, ReduceOp::avg, 3},     {(1 << 18), DType::f32, ReduceOp::sum, 0},
                             {(1 << 20) + 5, DType::bf16, ReduceOp::sum, 0}, {(3 << 18) + 1, DType::f32, ReduceOp::avg, 1}};
  std::vector<Tensor> peer_results, nccl_results;
  std::vector<std::string> names;
  for (int round = 0; round < 3; ++round) {  // queued back to back: no host waits in between
    for (const Case& c : cases) {
      Tensor base = on_gpu(c.n + c.offset, c.d, value);
      Tensor a = narrow(base, 0, c.offset, c.n);
      Tensor b = clone(a);
      peer->all_reduce(a, {.op = c.op});
      nccl->all_reduce(b, {.op = c.op});
      peer_results.push_back(a);
      nccl_results.push_back(b);
      names.push_back(str_cat("all_reduce ", reduce_op_name(c.op), " of ", c.n, " ", c.d, " at offset ", c.offset,
                              ", round ", round));
      // The halves of an all-reduce: rank r keeps chunk r of the sum; every rank's input in order.
      const int W = world.size();
      Tensor rs_in = on_gpu(W * c.n, c.d, value);
      Tensor rs_peer = to_device(Tensor::empty({c.n}, c.d), g_device), rs_nccl = clone(rs_peer);
      peer->reduce_scatter(rs_peer, rs_in, {.op = c.op});
      WorkPtr rs_nccl_done = nccl->reduce_scatter(rs_nccl, rs_in, {.op = c.op});
      // A fresh input: each group's stream waits for the caller's, not for the other group's.
      Tensor ag_in = narrow(on_gpu(c.n + c.offset, c.d, value), 0, c.offset, c.n);
      Tensor ag_peer = to_device(Tensor::empty({W * c.n}, c.d), g_device), ag_nccl = clone(ag_peer);
      peer->all_gather(ag_peer, ag_in);
      nccl->all_gather(ag_nccl, ag_in);
      // Note [staged reduce-scatter]: the input written chunk by chunk, the peer's chunk announced
      // (or, in round 1, left for finish() to send); chunks of more than one slot go whole.
      Tensor st_in = to_device(Tensor::empty({W * c.n}, c.d), g_device);
      Tensor st_peer = to_device(Tensor::empty({c.n}, c.d), g_device);
      auto staged = peer->reduce_scatter_staged(st_peer, st_in, {.op = c.op});
      const bool fits = c.n * int64_t(dtype_size(c.d)) <= (1 << 20);
      EXPECT_TRUE(staged->sends_early() == fits, "a staged reduce_scatter of ", c.n, " ", c.d,
                  (fits ? " should" : " should not"), " send early with 1 MiB slots");
      if (fits && round == 0) {
        expect_error([&] { peer->all_reduce(clone(a)); }, {"staged reduce_scatter is open"},
                     "an all_reduce between a staged reduce_scatter's start and finish");
      }
      for (int step = 1; step <= W; ++step) {
        const int q = (r + step) % W;
        if (q != r && round == 0) {  // round 0: the peer's chunk written and announced in 3 parts
          int64_t done = 0;
          for (int64_t part = 1; part <= 3; ++part) {
            const int64_t end = c.n * part / 3;
            Tensor piece = narrow(st_in, 0, q * c.n + done, end - done);
            copy_(piece, narrow(rs_in, 0, q * c.n + done, end - done));
            staged->chunk_part_written(q, end);
            if (fits && part == 2 && end > 0) {
              expect_error([&] { staged->chunk_part_written(q, end - 1); }, {"parts go in order"},
                           "a part announced after a longer one");
            }
            done = end;
          }
          staged->chunk_written(q);
          continue;
        }
        Tensor chunk = narrow(st_in, 0, q * c.n, c.n);
        copy_(chunk, narrow(rs_in, 0, q * c.n, c.n));
        if (q != r && round != 1) staged->chunk_written(q);
      }
      // Round 2 adds a bias and then a residual in the sum's pass where the path can: the bits of
      // two separate adds.
      const int64_t period = c.n % 256 == 0 ? 256 : c.n;
      Tensor bias = on_gpu(period, c.d, value);
      Tensor residual = on_gpu(c.n, c.d, [&](int64_t i) { return value(i + 11) * 3.0; });
      const bool with_bias = round == 2 && staged->adds_bias();
      EXPECT_TRUE(staged->adds_bias() == fits, "a staged reduce_scatter that sends early should add a bias");
      staged->finish(with_bias ? bias : Tensor(), with_bias ? residual : Tensor());
      Tensor st_want = rs_nccl;
      if (with_bias) {
        rs_nccl_done->wait();
        st_want = add(reshape(add(reshape(rs_nccl, {c.n / period, period}), bias), {c.n}), residual);
      }
      // Note [staged all-gather]: the peer's input read where it landed, then the whole output.
      Tensor sag_out = to_device(Tensor::empty({W * c.n}, c.d), g_device);
      auto sag = peer->all_gather_staged(sag_out, ag_in);
      const int other = (r + 1) % W;
      Tensor sag_arrived = clone(sag->arrived(other));
      sag->finish()->wait();
      auto arrivals_only = peer->all_gather_staged(Tensor(), ag_in);  // no output; the others' rows kept
      Tensor kept = to_device(Tensor::empty({(W - 1) * c.n}, c.d), g_device);
      arrivals_only->keep_others(kept);
      Tensor only_arrived = clone(arrivals_only->arrived(other));
      arrivals_only->finish()->wait();
      const Tensor ag_other = narrow(ag_nccl, 0, other * c.n, c.n);
      // StagedReduceScatter::others_sum: only the peer's chunk written; the peer's sum, plus this
      // rank's chunk added here, gives NCCL's bits (two ranks: one add either way round).
      if (c.op == ReduceOp::sum && W == 2) {
        Tensor os_in = to_device(Tensor::empty({W * c.n}, c.d), g_device);
        Tensor os_out = to_device(Tensor::empty({c.n}, c.d), g_device);
        auto by_caller = peer->reduce_scatter_staged(os_out, os_in, {.op = c.op});
        Tensor os_chunk = narrow(os_in, 0, other * c.n, c.n);
        copy_(os_chunk, narrow(rs_in, 0, other * c.n, c.n));
        by_caller->chunk_written(other);
        Tensor os_sum = add(by_caller->others_sum(), narrow(rs_in, 0, r * c.n, c.n));
        by_caller->finish();
        peer_results.push_back(os_sum);
        nccl_results.push_back(rs_nccl);
        names.push_back(str_cat("staged reduce_scatter's others_sum + own chunk, ", c.n, " ", c.d, ", round ", round));
      }
      peer_results.insert(peer_results.end(), {rs_peer, ag_peer, st_peer, sag_out, sag_arrived, only_arrived, kept});
      nccl_results.insert(nccl_results.end(), {rs_nccl, ag_nccl, st_want, ag_nccl, ag_other, ag_other, ag_other});
      names.push_back(str_cat("reduce_scatter ", reduce_op_name(c.op), " of ", W, " x ", c.n, " ", c.d, ", round ", round));
      names.push_back(str_cat("all_gather of ", c.n, " ", c.d, " at offset ", c.offset, ", round ", round));
      names.push_back(str_cat("staged reduce_scatter ", reduce_op_name(c.op), " of ", W, " x ", c.n, " ", c.d,
                              round == 0 ? ", chunks in 3 parts" : round == 1 ? ", chunks left to finish()" : "",
                              with_bias ? ", with a bias and a residual" : "",
                              ", round ", round));
      names.push_back(str_cat("staged all_gather of ", c.n, " ", c.d, ", round ", round));
      names.push_back(str_cat("staged all_gather's arrival from rank ", other, " of ", c.n, " ", c.d, ", round ", round));
      names.push_back(str_cat("output-less staged all_gather's arrival from rank ", other, " of ", c.n, " ", c.d,
                              ", round ", round));
      names.push_back(str_cat("staged all_gather's kept rows of the other rank, ", c.n, " ", c.d, ", round ", round));
    }
  }
  peer->barrier()->wait(20s);
  nccl->barrier()->wait(20s);
  for (size_t k = 0; k < peer_results.size(); ++k) {
    std::vector<double> got = values_of(peer_results[k]), want = values_of(nccl_results[k]);
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i] && bad++ == 0) first_bad = i;
    }
    EXPECT_TRUE(bad == 0, "peer all-reduce ", names[k], ": ", bad, " elements differ from NCCL's, the first at ",
                first_bad, ": ", bad ? got[first_bad] : 0.0, " vs ", bad ? want[first_bad] : 0.0);
  }
  std::printf("rank %d: %zu peer collectives equal to NCCL's\n", r, peer_results.size());
}

int main(int argc, char** argv) {
  std::string scenario = argc > 1 ? argv[1] : "collectives";
  ::alarm(120);  // a hang is a failure (SIGALRM), never a stuck test
  try {
    DistEnv env = dist_env_from_environment();
    g_rank = env.rank;
    std::printf("pid=%d rank=%d\n", static_cast<int>(::getpid()), env.rank);
    std::fflush(stdout);
    cuda::set_device(env.local_rank);
    g_device = Device::cuda(env.local_rank);
    auto store = std::make_shared<StoreClient>(store_client_options(env, 20s));
    ProcessGroupNccl world(store, env.rank, env.world_size, NcclOptions{.timeout = 20s});
    if (scenario == "collectives") {
      collectives(world, store);
    } else if (scenario == "peer_all_reduce") {
      peer_all_reduce(world, store);
    } else if (scenario == "p2p_alone" || scenario == "p2p_queued") {
      p2p_order(world, *store, scenario == "p2p_alone");
    } else if (scenario == "timeout") {
      auto second = world.new_group({0, 1}, "second");
      world.barrier()->wait(10s);
      second->barrier()->wait(10s);
      if (env.rank == 1) {  // skips every collective from here on
        store->get("rank0_done", 60s);
        std::fflush(stdout);
        ::_exit(0);
      }
      // wait(timeout): the op's own timeout fires; the error names the op.
      Tensor t = on_gpu(3, DType::f32, [](int64_t) { return 1.0; });
      auto start = std::chrono::steady_clock::now();
      expect_error([&] { world.all_reduce(t, {.timeout = 500ms})->wait(10s); }, {"all_reduce", "timed out", "rank 0"},
                   "a collective that rank 1 skips");
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      std::printf("wait(timeout) error after %lld ms\n", static_cast<long long>(ms.count()));
      EXPECT_TRUE(ms < 3000ms, "the timeout took ", ms.count(), " ms");
      expect_error([&] { world.barrier(); }, {"barrier", "aborted", "all_reduce"}, "a call after the abort");

      // wait() without a timeout: the watchdog aborts, the stream moves on, the next call throws.
      Tensor u = on_gpu(3, DType::f32, [](int64_t) { return 1.0; });
      start = std::chrono::steady_clock::now();
      std::string path = "the all_reduce call";
      expect_error(
          [&] {
            auto w = second->all_reduce(u, {.timeout = 500ms});
            w->wait();
            path = "the device synchronize";
            cuda::synchronize();  // returns once the watchdog has aborted the communicator
            path = "the next call";
            second->barrier();
          },
          {"all_reduce", "timed out"}, "a skipped collective waited for on the stream");
      ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      std::printf("watchdog error after %lld ms, thrown by %s\n", static_cast<long long>(ms.count()), path.c_str());
      EXPECT_TRUE(ms < 5000ms, "the watchdog took ", ms.count(), " ms");
      store->set("rank0_done", "1");
    } else if (scenario == "peer_dies" || scenario == "die") {
      world.barrier()->wait(10s);
      if (env.rank == 1) {
        std::printf("rank 1 going away\n");
        std::fflush(stdout);
        if (scenario == "die") ::raise(SIGKILL);
        ::_exit(0);  // no goodbye to the store: counts as dead (Note [store liveness])
      }
      Tensor t = on_gpu(3, DType::f32, [](int64_t) { return 1.0; });
      auto start = std::chrono::steady_clock::now();
      try {
        world.all_reduce(t, {.timeout = 20s})->wait(30s);
        EXPECT_TRUE(false, "all_reduce with a dead peer should fail");
      } catch (const Error& e) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        std::printf("error after %lld ms: %s\n", static_cast<long long>(ms.count()), e.what());
        std::fflush(stdout);
        if (scenario == "die") ::_exit(3);  // the launcher should still blame rank 1
        EXPECT_TRUE(what_of(e).find("rank 1 exited or was killed") != std::string::npos, e.what());
        EXPECT_TRUE(what_of(e).find("all_reduce") != std::string::npos, e.what());
        EXPECT_TRUE(ms < 8000ms, "noticing the dead peer took ", ms.count(), " ms");
      }
    } else if (scenario == "throws") {
      // Rank 1 fails with a collective in flight that rank 0 never joins: unwinding destroys the
      // group, which must abort at once rather than wait out the op's 20 s timeout.
      world.barrier()->wait(10s);
      if (env.rank == 0) {
        store->get("never_set", 60s);  // the launcher ends this rank once rank 1 has failed
        return 0;
      }
      Tensor t = on_gpu(3, DType::f32, [](int64_t) { return 1.0; });
      auto in_flight = world.all_reduce(t, {.timeout = 20s});
      TRIREME_CHECK(false, "rank 1 fails on purpose with an all_reduce in flight");
    } else {
      std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
      return 2;
    }
    std::printf("rank %d: %s ok\n", env.rank, scenario.c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", g_rank, e.what());
    return 1;
  }
}
