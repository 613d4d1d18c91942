// ZeroOptimizer: AdamW on this dp rank's chunks of the gradient buckets, then an all-gather.
#include "trireme/parallel/zero.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {

std::vector<ZeroOptimizer::Piece> ZeroOptimizer::pieces_of(Reducer& reducer) {
  TRIREME_CHECK(reducer.zero1(), "ZeroOptimizer: the Reducer must be built with zero1 = true");
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
      Tensor master = p.detach().alias({end - begin}, {1}, p.offset() + begin);  // shares p's storage
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

ZeroOptimizer::ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options)
    : ZeroOptimizer(reducer, options, pieces_of(reducer)) {}

ZeroOptimizer::ZeroOptimizer(Reducer& reducer, const optim::AdamWOptions& options, std::vector<Piece> pieces)
    : optim::AdamW(named(pieces), options), reducer_(reducer), pieces_(std::move(pieces)) {}

void ZeroOptimizer::step() {
  optim::AdamW::step();  // updates my elements of the parameters in place
  const int D = reducer_.dp_size(), k = reducer_.dp_rank();
  const auto& params = reducer_.params();
  NoGradGuard no_grad;
  std::vector<dist::WorkPtr> works;
  std::vector<Tensor> inputs;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    const BucketLayout& L = reducer_.buckets()[b];
    const int64_t chunk = L.numel / D;
    // The gradient bucket, spent once reduce-scattered: the all-gather needs no buffer of its own.
    Tensor out = reducer_.bucket_buffer(b);
    // Pack the parameters into the bucket's layout (my chunk is what the others need).
    for (const BucketSlot& slot : L.slots) {
      Tensor dst = narrow(out, 0, slot.offset, slot.numel);
      copy_(dst, reshape(params[slot.param].second.detach(), {slot.numel}));
    }
    if (reducer_.dp_group() && D > 1) {
      inputs.push_back(clone(narrow(out, 0, int64_t(k) * chunk, chunk)));
      works.push_back(reducer_.dp_group()->all_gather(out, inputs.back()));
    }
  }
  for (auto& w : works) w->wait();
  if (D == 1) return;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    for (const BucketSlot& slot : reducer_.buckets()[b].slots) {
      Tensor p = params[slot.param].second.detach();
      copy_(p, view(narrow(reducer_.bucket_buffer(b), 0, slot.offset, slot.numel), p.sizes()));
    }
  }
}

void ZeroOptimizer::zero_grad(bool /*set_to_none*/) {
  NoGradGuard no_grad;
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    Tensor shard = reducer_.shard_grad(b);
    zero_(shard);
    // step() gathered the parameters through the bucket: all of it, the slots of parameters
    // that hold no gradient and the padding included, must be zero for the next reduction. The
    // gradients that are views of it (all of them once a reduction has run) go with it.
    Tensor bucket = reducer_.bucket_buffer(b);
    zero_(bucket);
    for (const BucketSlot& slot : reducer_.buckets()[b].slots) {
      Tensor g = reducer_.params()[slot.param].second.grad();
      if (g.defined() && g.storage() != bucket.storage()) zero_(g);
    }
  }
}

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
    TRIREME_CHECK(it != state.end(), "ZeroOptimizer::load_state_dict: '", key, "' is missing (not a ZeRO-1 state?)");
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
