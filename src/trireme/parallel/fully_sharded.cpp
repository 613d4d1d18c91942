// FullyShardedParams: ZeRO-3's flat parameter buffers, gathered around their use.
#include "trireme/parallel/fully_sharded.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {
namespace {

// x itself (a view of it), whose backward runs `hook` before passing the gradient on.
Tensor on_backward(const Tensor& x, const char* name, std::function<void()> hook) {
  if (!autograd::any_requires_grad({&x})) return x;
  Tensor out = x.detach();
  autograd::record(name, {&x}, {&out}, [hook = std::move(hook)](const autograd::TensorList& grads) {
    hook();
    return autograd::TensorList{grads[0]};
  });
  return out;
}

}  // namespace

FullyShardedParams::FullyShardedParams(Reducer& reducer) : reducer_(reducer), sharded_(reducer.dp_size() > 1) {
  TRIREME_CHECK(reducer.zero() == 3, "FullyShardedParams: the Reducer's ZeRO stage is ", reducer.zero(), ", not 3");
  const auto& layout = reducer.buckets();
  int n = 0;
  for (const BucketLayout& L : layout) n = std::max(n, L.unit + 1);
  units_.resize(size_t(n));
  const int D = reducer.dp_size(), k = reducer.dp_rank();
  NoGradGuard no_grad;
  for (size_t b = 0; b < layout.size(); ++b) {
    const BucketLayout& L = layout[b];
    if (L.unit < 0) continue;
    Unit& unit = units_[size_t(L.unit)];
    unit.bucket = b;
    const Device device = reducer.params()[L.slots[0].param].second.device();
    unit.flat = zeros({L.numel}, L.dtype, device);
    for (const BucketSlot& slot : L.slots) {
      const Tensor& p = reducer.params()[slot.param].second;
      Tensor place = unit.flat.alias(p.sizes(), contiguous_strides(p.sizes()), slot.offset);
      copy_(place, p.detach());
      p.set_data(place);
    }
    const int64_t chunk = L.numel / D;
    unit.shard = sharded_ ? clone(narrow(unit.flat, 0, int64_t(k) * chunk, chunk)) : unit.flat;
    if (sharded_) {
      unit.flat.storage()->release();
      unit.gathered = false;
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) TRIREME_CHECK(units_[u].flat.defined(), "FullyShardedParams: unit ", u, " has no bucket");
}

FullyShardedParams::~FullyShardedParams() {
  for (Unit& unit : units_) {
    if (!unit.gathering) continue;
    try {
      unit.gathering->wait();
    } catch (...) {  // an error already on its way out
    }
  }
}

void FullyShardedParams::prefetch(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.gathered || unit.gathering) return;
  unit.flat.storage()->reacquire();
  unit.gathering = reducer_.dp_group()->all_gather(unit.flat, unit.shard);
}

void FullyShardedParams::gather(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.gathered) return;
  prefetch(u);
  unit.gathering->wait();  // NCCL: this stream waits for it
  unit.gathering.reset();
  unit.gathered = true;
}

void FullyShardedParams::release(size_t u) {
  Unit& unit = units_.at(u);
  if (!sharded_) return;
  if (unit.gathering) {  // a prefetch nobody used (a forward that ended early): let it land first
    unit.gathering->wait();
    unit.gathering.reset();
  }
  unit.flat.storage()->release();
  unit.gathered = false;
}

void FullyShardedParams::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) prefetch(u);
  for (size_t u = 0; u < units_.size(); ++u) gather(u);
}

void FullyShardedParams::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void FullyShardedParams::keep_gathered_values() {
  if (!sharded_) return;  // the shards are the parameters
  NoGradGuard no_grad;
  const int64_t k = reducer_.dp_rank();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    TRIREME_CHECK(unit.gathered, "FullyShardedParams::keep_gathered_values: unit ", u, " is not gathered");
    const int64_t chunk = unit.shard.numel();
    copy_(unit.shard, narrow(unit.flat, 0, k * chunk, chunk));
  }
}

Tensor FullyShardedParams::run(size_t u, const Tensor& x, const std::function<Tensor(const Tensor&)>& forward) {
  gather(u);
  if (u + 1 < units_.size()) prefetch(u + 1);
  // Backward order: the hook on the output runs before the unit's backward, the one on the input
  // after all of it (every node of the unit lies between the two).
  Tensor in = on_backward(x, "zero3.release", [this, u] { release(u); });
  Tensor y = forward(in);
  y = on_backward(y, "zero3.gather", [this, u] {
    gather(u);
    if (u > 0) prefetch(u - 1);
  });
  release(u);
  return y;
}

}  // namespace trireme::parallel
