// ZeroOptimizer: AdamW on this dp rank's chunks of the gradient buckets, then an all-gather.
#include "trireme/parallel/zero.h"

#include <deque>

#include "trireme/autograd/grad_mode.h"
#include "trireme/dist/recorded_collective.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {

std::vector<ZeroOptimizer::Piece> ZeroOptimizer::pieces_of(Reducer& reducer, const FullyShardedParams* sharded) {
  TRIREME_CHECK(reducer.zero() > 0, "ZeroOptimizer: the Reducer must be built with a ZeRO stage (zero >= 1)");
  TRIREME_CHECK((reducer.zero() == 3) == (sharded != nullptr), "ZeroOptimizer: ZeRO-3 (and only it) needs the ",
                "FullyShardedParams of its Reducer");
  const int D = reducer.dp_size(), k = reducer.dp_rank();
  const auto& params = reducer.params();
  std::vector<Piece> pieces;
  for (size_t b = 0; b < reducer.buckets().size(); ++b) {
    const BucketLayout& L = reducer.buckets()[b];
    const int64_t chunk = L.numel / D, lo = int64_t(k) * chunk, hi = lo + chunk;
    for (const BucketSlot& slot : L.slots) {
      // The part of this parameter inside my chunk [lo, hi) of the bucket.
      const int64_t a = std::max(lo, slot.offset), e = std::min(hi, slot.offset + slot.numel);
      if (a >= e) continue;
      const Tensor& p = params[slot.param].second;
      TRIREME_CHECK(p.is_contiguous(), "ZeroOptimizer: parameter '", params[slot.param].first,
                    "' must be contiguous");
      const int64_t begin = a - slot.offset, end = e - slot.offset;
      // The elements to update: in the parameter itself, or in the unit's shard under ZeRO-3.
      const Tensor& shard = L.unit >= 0 ? sharded->shard(size_t(L.unit)) : Tensor();
      Tensor master = L.unit >= 0 ? shard.alias({end - begin}, {1}, shard.offset() + (a - lo))
                                  : p.detach().alias({end - begin}, {1}, p.offset() + begin);
      master.set_requires_grad(true);
      master.set_grad(reducer.shard_grad(b).alias({end - begin}, {1}, reducer.shard_grad(b).offset() + (a - lo)));
      pieces.push_back({slot.param, str_cat(params[slot.param].first, "[", begin, ":", end, "]"), begin, end, master});
    }
  }
  return pieces;
}

optim::NamedParams ZeroOptimizer::named(const std::vector<Piece>& pieces) {
  optim::NamedParams out;
  for (const Piece& p : pieces) out.emplace_back(p.name, p.master);
  return out;
}

ZeroOptimizer::ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options, FullyShardedParams* sharded)
    : ZeroOptimizer(reducer, options, pieces_of(reducer, sharded)) {
  sharded_ = sharded;
}

ZeroOptimizer::ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options, std::vector<Piece> pieces)
    : optim::AdamW(named(pieces), options), reducer_(reducer), pieces_(std::move(pieces)) {}

void ZeroOptimizer::step() {
  optim::AdamW::step();  // updates my elements of the parameters (ZeRO-3: of the shards) in place
  // ZeRO-3: a unit still gathered now holds the values before the step (a unit whose input needs
  // no gradient, as the first block of a LoRA run over frozen embeddings, is not released by the
  // backward): released, its next forward gathers the updated shards.
  if (sharded_) sharded_->release_all();
  const int D = reducer_.dp_size(), k = reducer_.dp_rank();
  if (D == 1) return;
  const auto& params = reducer_.params();
  NoGradGuard no_grad;
  // Every bucket's parameters all-gathered into their places but ZeRO-3's units, which stay
  // sharded until their next forward gathers them. ZeRO-1 gathers through the gradient bucket,
  // spent once reduce-scattered; ZeRO-2/3 hold no buckets, so through a buffer for the occasion,
  // two in flight at most (the parameters' size once more would be a peak of its own).
  struct InFlight {
    size_t bucket;
    Tensor buffer, mine;
    dist::WorkPtr work;
  };
  std::deque<InFlight> flight;
  auto land = [&] {
    InFlight f = std::move(flight.front());
    flight.pop_front();
    f.work->wait();
    for (const BucketSlot& slot : reducer_.buckets()[f.bucket].slots) {
      Tensor p = params[slot.param].second.detach();
      copy_(p, view(narrow(f.buffer, 0, slot.offset, slot.numel), p.sizes()));
    }
  };
  const size_t window = reducer_.zero() == 1 ? reducer_.buckets().size() : 2;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    const BucketLayout& L = reducer_.buckets()[b];
    if (L.unit >= 0) continue;
    const int64_t chunk = L.numel / D;
    const Device device = params[L.slots[0].param].second.device();
    Tensor out = reducer_.zero() == 1 ? reducer_.bucket_buffer(b) : Tensor::empty({L.numel}, L.dtype, device);
    // My chunk is what the others need: the parameters packed in the bucket's layout.
    Tensor mine = zeros({chunk}, L.dtype, device);
    for (const BucketSlot& slot : L.slots) {
      const int64_t a = std::max(int64_t(k) * chunk, slot.offset), e = std::min(int64_t(k + 1) * chunk, slot.offset + slot.numel);
      if (a >= e) continue;
      Tensor dst = narrow(mine, 0, a - int64_t(k) * chunk, e - a);
      copy_(dst, narrow(reshape(params[slot.param].second.detach(), {slot.numel}), 0, a - slot.offset, e - a));
    }
    if (flight.size() == window) land();
    flight.push_back({b, out, mine, dist::record_collective("all_gather", {out, mine}, [group = reducer_.dp_group()](
                                                                Tensor* const* t) { return group->all_gather(*t[0], *t[1]); })});
  }
  while (!flight.empty()) land();
}

void ZeroOptimizer::zero_grad(bool /*set_to_none*/) { reducer_.zero_grad(); }

std::vector<GradPiece> ZeroOptimizer::grad_pieces(const std::map<std::string, ShardSpec>& tp_specs,
                                                  const std::set<std::string>& counted_elsewhere) const {
  std::vector<GradPiece> out;
  for (const Piece& p : pieces_) {
    const std::string& name = reducer_.params()[p.param].first;
    auto it = tp_specs.find(name);
    out.push_back({p.master.grad(), it != tp_specs.end() && it->second.size > 1, /*dp_sharded=*/true,
                   /*counted=*/!counted_elsewhere.count(name)});
  }
  return out;
}

int64_t ZeroOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const Piece& p : pieces_) n += p.master.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> ZeroOptimizer::state_dict() const {
  auto out = optim::AdamW::state_dict();
  Tensor rank = Tensor::empty({1}, DType::i64), size = Tensor::empty({1}, DType::i64);
  rank.data<int64_t>()[0] = reducer_.dp_rank();
  size.data<int64_t>()[0] = reducer_.dp_size();
  out.emplace_back("zero.dp_rank", rank);
  out.emplace_back("zero.dp_size", size);
  return out;
}

void ZeroOptimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto get = [&](const char* key) {
    auto it = state.find(key);
    TRIREME_CHECK(it != state.end(), "ZeroOptimizer::load_state_dict: '", key, "' is missing (not a ZeRO state?)");
    return int64_t(it->second.item());
  };
  const int64_t rank = get("zero.dp_rank"), size = get("zero.dp_size");
  TRIREME_CHECK(rank == reducer_.dp_rank() && size == reducer_.dp_size(), "ZeroOptimizer::load_state_dict: the state ",
                "is dp rank ", rank, " of ", size, "'s shard, but this is dp rank ", reducer_.dp_rank(), " of ",
                reducer_.dp_size());
  std::map<std::string, Tensor> rest(state);
  rest.erase("zero.dp_rank");
  rest.erase("zero.dp_size");
  optim::AdamW::load_state_dict(rest);
}

void ZeroOptimizer::load_unsharded_state_dict(const std::map<std::string, Tensor>& state) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> mine;
  for (const char* key : {"step", "lr"}) {
    if (auto it = state.find(key); it != state.end()) mine[key] = it->second;
  }
  for (const Piece& piece : pieces_) {
    const std::string prefix = "state." + reducer_.params()[piece.param].first + ".";
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      const std::string key = it->first.substr(prefix.size());
      if (key.find('.') != std::string::npos) continue;  // another parameter's, named with this one as prefix
      const Tensor& t = it->second;
      TRIREME_CHECK(t.numel() == reducer_.params()[piece.param].second.numel(), "ZeroOptimizer::load_unsharded_state_dict: '",
                    it->first, "' has ", t.numel(), " elements but the parameter has ",
                    reducer_.params()[piece.param].second.numel());
      mine["state." + piece.name + "." + key] =
          contiguous(narrow(reshape(contiguous(t), {-1}), 0, piece.begin, piece.end - piece.begin));
    }
  }
  optim::AdamW::load_state_dict(mine);
}

std::vector<GradPiece> optimizer_grad_pieces(const optim::Optimizer& optimizer, const nn::NamedTensors& params,
                                             const std::map<std::string, ShardSpec>& tp_specs,
                                             const std::set<std::string>& counted_elsewhere) {
  if (const auto* zero = dynamic_cast<const ZeroOptimizer*>(&optimizer)) {
    return zero->grad_pieces(tp_specs, counted_elsewhere);
  }
  return grad_pieces(params, tp_specs, counted_elsewhere);
}

}  // namespace trireme::parallel
