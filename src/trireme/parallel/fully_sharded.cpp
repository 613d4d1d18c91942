// FullyShardedParams: ZeRO-3's flat parameter buffers, gathered around their use.
#include "trireme/parallel/fully_sharded.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/autograd/node.h"
#include "trireme/dist/recorded_collective.h"
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

// p becomes a view of `flat` at element `offset`, holding its value.
void move_into(const Tensor& p, const Tensor& flat, int64_t offset) {
  Tensor place = flat.alias(p.sizes(), contiguous_strides(p.sizes()), offset);
  copy_(place, p.detach());
  p.set_data(place);
}

}  // namespace

FullyShardedParams::FullyShardedParams(Reducer& reducer, const std::vector<std::vector<Tensor>>& frozen)
    : reducer_(reducer), sharded_(reducer.dp_size() > 1) {
  TRIREME_CHECK(reducer.zero() == 3, "FullyShardedParams: the Reducer's ZeRO stage is ", reducer.zero(), ", not 3");
  const auto& layout = reducer.buckets();
  int n = 0;
  for (const BucketLayout& L : layout) n = std::max(n, L.unit + 1);
  units_.resize(size_t(n));
  TRIREME_CHECK(frozen.empty() || frozen.size() == units_.size(), "FullyShardedParams: frozen parameters for ",
                frozen.size(), " units, but the Reducer has ", units_.size());
  const int D = reducer.dp_size(), k = reducer.dp_rank();
  NoGradGuard no_grad;
  for (size_t b = 0; b < layout.size(); ++b) {
    const BucketLayout& L = layout[b];
    if (L.unit < 0) continue;
    Unit& unit = units_[size_t(L.unit)];
    unit.bucket = b;
    const Device device = reducer.params()[L.slots[0].param].second.device();
    Flat& f = unit.trained;
    f.whole = zeros({L.numel}, L.dtype, device);
    for (const BucketSlot& slot : L.slots) move_into(reducer.params()[slot.param].second, f.whole, slot.offset);
    const int64_t chunk = L.numel / D;
    f.shard = sharded_ ? clone(narrow(f.whole, 0, int64_t(k) * chunk, chunk)) : f.whole;
    if (sharded_) {
      f.whole.storage()->release();
      unit.gathered = false;
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    TRIREME_CHECK(units_[u].trained.whole.defined(), "FullyShardedParams: unit ", u, " has no bucket");
    if (!frozen.empty()) shard_frozen(units_[u], frozen[u]);
  }
}

void FullyShardedParams::shard_frozen(Unit& unit, const std::vector<Tensor>& params) {
  if (!sharded_ || params.empty()) return;  // one rank: the parameters stay as they are
  const int D = reducer_.dp_size(), k = reducer_.dp_rank();
  int64_t numel = 0;
  for (const Tensor& p : params) {
    TRIREME_CHECK(!p.requires_grad() && p.dtype() == params[0].dtype() && p.device() == params[0].device(),
                  "FullyShardedParams: a unit's frozen parameters must not require gradients and share one dtype "
                  "and device, got ", p.str());
    numel += p.numel();
  }
  const int64_t chunk = (numel + D - 1) / D;  // padded to a multiple of the dp size, as a bucket
  Flat& f = unit.frozen;
  f.whole = zeros({chunk * D}, params[0].dtype(), params[0].device());
  int64_t offset = 0;
  for (const Tensor& p : params) {
    move_into(p, f.whole, offset);
    offset += p.numel();
  }
  f.shard = clone(narrow(f.whole, 0, int64_t(k) * chunk, chunk));
  f.whole.storage()->release();
}

FullyShardedParams::~FullyShardedParams() {
  for (Unit& unit : units_) {
    for (Flat* f : {&unit.trained, &unit.frozen}) {
      if (!f->gathering) continue;
      try {
        f->gathering->wait();
      } catch (...) {  // an error already on its way out
      }
    }
  }
}

void FullyShardedParams::prefetch(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.gathered || unit.trained.gathering) return;
  for (Flat* f : {&unit.trained, &unit.frozen}) {
    if (!f->whole.defined()) continue;
    // One node of a traced step (dist/recorded_collective.h) that also reacquires the memory,
    // which the unit's release nodes give back.
    f->gathering = dist::record_collective("all_gather", {f->whole, f->shard}, [group = reducer_.dp_group()](
                                                                                  Tensor* const* t) {
      t[0]->storage()->reacquire();
      return group->all_gather(*t[0], *t[1]);
    });
  }
}

void FullyShardedParams::gather(size_t u) {
  Unit& unit = units_.at(u);
  if (unit.gathered) return;
  prefetch(u);
  for (Flat* f : {&unit.trained, &unit.frozen}) {
    if (!f->gathering) continue;
    f->gathering->wait();  // NCCL: this stream waits for it
    f->gathering.reset();
  }
  unit.gathered = true;
}

void FullyShardedParams::release(size_t u) {
  Unit& unit = units_.at(u);
  if (!sharded_) return;
  for (Flat* f : {&unit.trained, &unit.frozen}) {
    if (!f->whole.defined()) continue;
    if (f->gathering) {  // a prefetch nobody used (a forward that ended early): let it land first
      f->gathering->wait();
      f->gathering.reset();
    }
    dist::record_release(f->whole);
  }
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
    for (Flat* f : {&unit.trained, &unit.frozen}) {
      if (!f->whole.defined()) continue;
      const int64_t chunk = f->shard.numel();
      copy_(f->shard, narrow(f->whole, 0, k * chunk, chunk));
    }
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
