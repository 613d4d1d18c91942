// Global gradient norm across tp, pp and dp, each element counted once.
#include "trireme/parallel/grad_norm.h"

#include <cmath>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/ops/reduce.h"
#include "trireme/parallel/context.h"

namespace trireme::parallel {

std::vector<GradPiece> grad_pieces(const nn::NamedTensors& params, const std::map<std::string, ShardSpec>& tp_specs,
                                   const std::set<std::string>& counted_elsewhere) {
  std::vector<GradPiece> out;
  for (const auto& [name, p] : params) {
    if (!p.grad().defined()) continue;
    auto it = tp_specs.find(name);
    out.push_back({p.grad(), it != tp_specs.end() && it->second.size > 1, false, !counted_elsewhere.count(name)});
  }
  return out;
}

namespace {
// The sum of squares as an f64 scalar tensor on g's device (no host sync on a GPU).
Tensor sum_of_squares(const Tensor& g) {
  NoGradGuard no_grad;
  Tensor g64 = to_dtype(g.detach(), DType::f64);
  return sum(g64 * g64);
}

void all_reduce_sum(Tensor& t, dist::ProcessGroup* group) {
  if (group && group->size() > 1) group->all_reduce(t)->wait();
}
}  // namespace

double global_grad_norm(const std::vector<GradPiece>& pieces, const ParallelContext& ctx) {
  // [0]: dp-replicated pieces, [1]: dp-sharded (ZeRO) pieces; in f64, fixed order. They live on
  // the gradients' device, so that NCCL groups (GPU tensors only) can reduce them.
  NoGradGuard no_grad;
  Device device = Device::cpu();
  for (const GradPiece& p : pieces) {
    if (p.grad.defined()) {
      device = p.grad.device();
      break;
    }
  }
  Tensor acc[2] = {zeros({}, DType::f64, device), zeros({}, DType::f64, device)};
  for (const GradPiece& p : pieces) {
    if (!p.grad.defined() || p.grad.numel() == 0 || !p.counted) continue;
    if (!p.tp_sharded && ctx.tp_rank() != 0) continue;  // a tp-replicated copy: tp rank 0 counts it
    Tensor& a = acc[p.dp_sharded ? 1 : 0];
    a = a + sum_of_squares(p.grad);
  }
  Tensor sums = contiguous(stack({acc[0], acc[1]}, 0));  // (2)
  all_reduce_sum(sums, ctx.tp_group());
  all_reduce_sum(sums, ctx.pp_group());
  // ZeRO shards are disjoint over dp; replicated gradients are identical there (add them once).
  Tensor z = contiguous(narrow(sums, 0, 1, 1));
  all_reduce_sum(z, ctx.dp_group());
  const Tensor host_sums = to_device(sums, Device::cpu()), host_z = to_device(z, Device::cpu());
  return std::sqrt(host_sums.at({0}) + host_z.at({0}));
}

double clip_global_grad_norm(const std::vector<GradPiece>& pieces, double max_norm, const ParallelContext& ctx) {
  const double norm = global_grad_norm(pieces, ctx);
  if (max_norm > 0 && norm > max_norm) {
    NoGradGuard no_grad;
    const double scale = max_norm / (norm + 1e-6);
    for (const GradPiece& p : pieces) {
      if (!p.grad.defined()) continue;
      Tensor g = p.grad;
      mul_(g, scale);
    }
  }
  return norm;
}

}  // namespace trireme::parallel
