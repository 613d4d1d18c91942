// Parameter hashes compared over the data-parallel group (see replica_check.h).
#include "trireme/parallel/replica_check.h"

#include <cstring>

#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"

namespace trireme::parallel {
namespace {

ReplicaCheckHook& hook() {
  static ReplicaCheckHook h;
  return h;
}

uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

}  // namespace

uint64_t tensor_bytes_hash(const Tensor& t) {
  Tensor host = contiguous(t.device().is_cpu() ? t.detach() : to_device(t.detach(), Device::cpu()));
  const auto* bytes = static_cast<const unsigned char*>(host.data_ptr());
  const size_t n = size_t(host.numel()) * dtype_size(host.dtype());
  uint64_t h = mix(0xcbf29ce484222325ull, n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = mix(h, w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes + i, n - i);
  return mix(h, tail);
}

void set_replica_check_hook(ReplicaCheckHook h) { hook() = std::move(h); }

void check_replicas_agree(const NamedParameters& params, const ParallelContext& ctx, int64_t step) {
  dist::ProcessGroup* dp = ctx.dp_group();
  if (!dp || dp->size() == 1) return;
  if (hook()) hook()(ctx, step, params);
  // Row of this rank: its world rank, the parameter count, then one hash per parameter.
  const int64_t n = int64_t(params.size()) + 2;
  Tensor mine = Tensor::empty({n}, DType::i64);
  int64_t* row = mine.data<int64_t>();
  row[0] = ctx.world_rank();
  row[1] = int64_t(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const uint64_t h = tensor_bytes_hash(params[i].second);
    std::memcpy(&row[i + 2], &h, 8);
  }
  const Device device = params.empty() ? Device::cpu() : params.front().second.device();
  Tensor all = Tensor::empty({int64_t(dp->size()) * n}, DType::i64, device);  // NCCL groups take GPU tensors
  dp->all_gather(all, to_device(mine, device))->wait();
  Tensor host = contiguous(to_device(all, Device::cpu()));
  const int64_t* rows = host.data<int64_t>();
  const int D = dp->size();
  auto who = [&](int d) { return str_cat("dp rank ", d, " (rank ", rows[d * n], ")"); };
  for (int d = 1; d < D; ++d) {
    TRIREME_CHECK(rows[d * n + 1] == rows[1], "replica check after step ", step, ": ", who(d), " has ",
                  rows[d * n + 1], " parameters but ", who(0), " has ", rows[1]);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    std::string differ;
    for (int d = 1; d < D; ++d) {
      if (rows[d * n + 2 + int64_t(i)] != rows[2 + int64_t(i)]) differ += (differ.empty() ? "" : ", ") + who(d);
    }
    TRIREME_CHECK(differ.empty(), "replica check after step ", step, ": parameter '", params[i].first,
                  "' differs between the data-parallel replicas: ", differ, " ", differ.find(',') == std::string::npos ? "holds" : "hold",
                  " other values than ", who(0), ". Replicas must stay bit-identical (a nondeterministic kernel, ",
                  "faulty GPU or host memory, or a bug in a reduction breaks that); restart from the last checkpoint ",
                  "and, if it recurs, check the hardware of those ranks");
  }
}

}  // namespace trireme::parallel
