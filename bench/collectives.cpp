// Collective bandwidth and launcher start-up time: bus bandwidth of all-reduce, all-gather and
// reduce-scatter from 4 KiB to 256 MiB (NCCL-tests convention: algbw = bytes / time, busbw =
// algbw x 2(n-1)/n for all-reduce and x (n-1)/n for the others, bytes being the whole buffer),
// and the time from starting the launcher to the first completed collective.
//
//   collectives                                  # gloo, f32, CPU, 2 and 4 local ranks
//   collectives --backend nccl --dtype bf16 --nproc 2
//   collectives --backend nccl --dtype bf16 --nproc 2 --peer-allreduce off   # NCCL's kernels only
//
// Without RANK in the environment it is the driver: it launches itself (through trireme's
// launcher, in-process) once per --nproc value and prints rank 0's markdown table.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include "trireme/core/tensor.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/env.h"
#include "trireme/dist/launcher.h"
#include "trireme/dist/process_group_factory.h"

using namespace trireme;
using namespace trireme::dist;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string backend = "gloo";
  std::string dtype = "f32";
  std::vector<int> nproc = {2, 4};
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t(256) << 20;
  // nccl: which groups use the copy-engine collectives (dist/peer_all_reduce_mode.h)
  PeerAllReduceMode peer_all_reduce = PeerAllReduceMode::automatic;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (f == "--backend") a.backend = next();
    else if (f == "--dtype") a.dtype = next();
    else if (f == "--max-bytes") a.max_bytes = std::atoll(next().c_str());
    else if (f == "--min-bytes") a.min_bytes = std::atoll(next().c_str());
    else if (f == "--peer-allreduce") {
      try {
        a.peer_all_reduce = parse_peer_all_reduce_mode(next());
      } catch (const Error& e) {
        std::fprintf(stderr, "collectives: --peer-allreduce: %s\n", e.what());
        std::exit(2);
      }
    }
    else if (f == "--nproc") {
      a.nproc.clear();
      std::string list = next();
      for (size_t at = 0; at < list.size();) {
        size_t comma = list.find(',', at);
        a.nproc.push_back(std::atoi(list.substr(at, comma - at).c_str()));
        at = comma == std::string::npos ? list.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "collectives: unknown flag %s\n", f.c_str());
      std::exit(2);
    }
  }
  return a;
}

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

std::string human(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

int worker(const Args& a) {
  DistEnv env = dist_env_from_environment();
  Device device = Device::cpu();
  if (a.backend == "nccl") {
#ifdef TRIREME_WITH_CUDA
    cuda::set_device(env.local_rank);
    device = Device::cuda(env.local_rank);
#endif
  }
  auto store = std::make_shared<StoreClient>(store_client_options(env, std::chrono::seconds(60)));
  auto group = make_process_group(a.backend, store, env.rank, env.world_size,
                                  {.timeout = std::chrono::seconds(120), .peer_all_reduce = a.peer_all_reduce});
  DType dtype = a.dtype == "bf16" ? DType::bf16 : DType::f32;
  auto blocking = std::chrono::seconds(120);  // wait(timeout) blocks the host for NCCL too
  Tensor one = Tensor::empty({1}, dtype, device);
  if (device.is_cpu()) std::memset(one.data_ptr(), 0, one.element_size());
  group->all_reduce(one)->wait(blocking);
  double startup = double(now_ns() - std::atoll(std::getenv("TRIREME_BENCH_START"))) * 1e-9;
  const int n = group->size();
  if (env.rank == 0) {
    std::printf("launch to first completed all_reduce, %d ranks: %.3f s\n\n", n, startup);
    std::printf("%s, %s, %d ranks (%s); bus bandwidth in GB/s (algbw in parentheses)\n\n", a.backend.c_str(),
                a.dtype.c_str(), n, device.str().c_str());
    std::printf("| size | all_reduce | all_gather | reduce_scatter |\n|---|---|---|---|\n");
  }
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    int64_t elements = bytes / int64_t(dtype_size(dtype));
    Tensor full = Tensor::empty({elements}, dtype, device);
    Tensor part = Tensor::empty({elements / n}, dtype, device);
    if (device.is_cpu()) {
      std::memset(full.data_ptr(), 0, size_t(bytes));
      std::memset(part.data_ptr(), 0, size_t(part.numel()) * part.element_size());
    }
    // On the CPU, fewer repetitions for big buffers (about 64 MiB moved per measurement, 2 to 20
    // times); on GPUs 20, as a big buffer still takes only milliseconds.
    int iters = a.backend == "nccl" ? 20 : int(std::max<int64_t>(2, std::min<int64_t>(20, (int64_t(64) << 20) / bytes)));
    std::string row = "| " + human(bytes) + " |";
    for (int kind = 0; kind < 3; ++kind) {
      auto issue = [&] {
        if (kind == 0) return group->all_reduce(full);
        if (kind == 1) return group->all_gather(full, part);
        return group->reduce_scatter(part, full);
      };
      issue()->wait(blocking);  // warm-up
      group->barrier()->wait(blocking);
      auto start = Clock::now();
      std::vector<WorkPtr> works;
      for (int i = 0; i < iters; ++i) works.push_back(issue());
      for (auto& w : works) w->wait(blocking);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
      double algbw = double(bytes) / seconds * 1e-9;
      double factor = kind == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
      char cell[64];
      std::snprintf(cell, sizeof(cell), " %.3f (%.3f) |", algbw * factor, algbw);
      row += cell;
    }
    if (env.rank == 0) {
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
    }
  }
  group->barrier()->wait(blocking);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (std::getenv("RANK")) return worker(a);
  for (int nproc : a.nproc) {
    LaunchOptions o;
    o.nproc_per_node = nproc;
    char self[4096] = {};
    if (::readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return 1;
    o.command = {self};
    for (int i = 1; i < argc; ++i) o.command.push_back(argv[i]);
    o.echo = false;
    ::setenv("TRIREME_BENCH_START", std::to_string(now_ns()).c_str(), 1);
    LaunchResult r = launch(o);
    std::string log = r.log_dir + "/rank_0.log";
    if (FILE* f = std::fopen(log.c_str(), "r")) {
      char buf[4096];
      size_t got;
      while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) std::fwrite(buf, 1, got, stdout);
      std::fclose(f);
    }
    if (r.exit_code != 0) {
      std::fprintf(stderr, "%s\n", r.message.c_str());
      return r.exit_code;
    }
    std::printf("\n");
  }
  return 0;
}
