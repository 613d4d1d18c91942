// Global gradient norm across tp, pp and dp, each element counted once.
#include "trireme/parallel/grad_norm.h"

#include <cmath>
#include <map>

#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/multi_tensor.h"
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

void all_reduce_sum(Tensor& t, dist::ProcessGroup* group) {
  if (!group || group->size() <= 1) return;
  dist::record_collective("all_reduce", {t}, [group](Tensor* const* x) { return group->all_reduce(*x[0]); })->wait();
}
}  // namespace

namespace {

// The summed squares as two f64 elements on the gradients' device: [0] the dp-replicated pieces
// (summed over tp and pp), [1] the ZeRO shards (summed over the whole world).
std::pair<Tensor, Tensor> squared_sums(const std::vector<GradPiece>& pieces, const ParallelContext& ctx) {
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
  std::vector<Tensor> counted[2];
  for (const GradPiece& p : pieces) {
    if (!p.grad.defined() || p.grad.numel() == 0 || !p.counted) continue;
    if (!p.tp_sharded && ctx.tp_rank() != 0) continue;  // a tp-replicated copy: tp rank 0 counts it
    counted[p.dp_sharded ? 1 : 0].push_back(p.grad);
  }
  const Tensor acc[2] = {sum_squares_all(counted[0], device), sum_squares_all(counted[1], device)};
  Tensor sums = contiguous(stack({acc[0], acc[1]}, 0));  // (2)
  all_reduce_sum(sums, ctx.tp_group());
  all_reduce_sum(sums, ctx.pp_group());
  // ZeRO shards are disjoint over dp; replicated gradients are identical there (add them once).
  Tensor z = contiguous(narrow(sums, 0, 1, 1));
  all_reduce_sum(z, ctx.dp_group());
  return {sums, z};
}

}  // namespace

double global_grad_norm(const std::vector<GradPiece>& pieces, const ParallelContext& ctx) {
  const auto [sums, z] = squared_sums(pieces, ctx);
  const Tensor host_sums = to_device(sums, Device::cpu()), host_z = to_device(z, Device::cpu());
  return std::sqrt(host_sums.at({0}) + host_z.at({0}));
}

Tensor clip_global_grad_norm_on_device(const std::vector<GradPiece>& pieces, double max_norm,
                                       const ParallelContext& ctx) {
  const auto [sums, z] = squared_sums(pieces, ctx);
  NoGradGuard no_grad;
  Tensor norm = sqrt(narrow(sums, 0, 0, 1) + z);  // (1): the f64 sum and root the host takes
  if (max_norm <= 0) return norm;
  // max_norm / (norm + 1e-6) where the norm exceeds max_norm, else 1 (x * 1 is x exactly).
  Tensor factor = where(gt(norm, max_norm), rdiv(add(norm, 1e-6), max_norm), ones({1}, DType::f64, norm.device()));
  std::vector<Tensor> grads;
  for (const GradPiece& p : pieces) {
    if (!p.grad.defined()) continue;
    TRIREME_CHECK(p.grad.dtype() == DType::f32 || p.grad.dtype() == DType::f64,
                  "clip_global_grad_norm_on_device: gradients of dtype ", p.grad.dtype(),
                  " are not supported (f32 or f64: the eager clip scales in f32)");
    grads.push_back(p.grad);
  }
  mul_all_(grads, factor);  // x * the factor rounded to x's dtype, as the scalar kernel's product
  return norm;
}

double clip_global_grad_norm(const std::vector<GradPiece>& pieces, double max_norm, const ParallelContext& ctx) {
  const double norm = global_grad_norm(pieces, ctx);
  if (max_norm > 0 && norm > max_norm) {
    NoGradGuard no_grad;
    std::vector<Tensor> grads;
    for (const GradPiece& p : pieces) {
      if (p.grad.defined()) grads.push_back(p.grad);
    }
    mul_all_(grads, max_norm / (norm + 1e-6));
  }
  return norm;
}

}  // namespace trireme::parallel
