// ShardSpec arithmetic, slicing, reassembly and keyed initialisation of shards.
#include "trireme/parallel/shard.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {
namespace {

void check_spec(const ShardSpec& s) {
  TRIREME_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "ShardSpec: rank ", s.rank, " of ", s.size);
  TRIREME_CHECK(s.dim >= 0 && s.dim < int(s.full_shape.size()), "ShardSpec: dim ", s.dim, " of a ",
                s.full_shape.size(), "-dim parameter ", s.full_shape);
  TRIREME_CHECK(s.blocks >= 1 && s.full_length() % s.blocks == 0, "ShardSpec: ", s.blocks,
                " blocks do not divide ", s.str());
  TRIREME_CHECK(!s.pad || s.blocks == 1, "ShardSpec: padding a dim cut in blocks is not supported: ", s.str());
  TRIREME_CHECK(s.pad || (s.full_length() / s.blocks) % s.size == 0, "ShardSpec: ", s.size,
                " ranks do not divide ", s.str(), " (each of its ", s.blocks, " blocks) and it is not padded");
}

}  // namespace

int64_t ShardSpec::padded_length() const { return pad ? round_up(full_length(), size) : full_length(); }

int64_t ShardSpec::shard_length() const {
  check_spec(*this);
  return padded_length() / size;
}

std::string ShardSpec::str() const {
  std::string s = str_cat("dim ", dim, " of ", full_shape, " over ", size, " ranks (rank ", rank, ")");
  if (blocks > 1) s += str_cat(" in ", blocks, " blocks");
  if (pad && padded_length() != full_length()) s += str_cat(", padded to ", padded_length());
  return s;
}

Shape shard_shape(const ShardSpec& spec) {
  Shape shape = spec.full_shape;
  shape[size_t(spec.dim)] = spec.shard_length();
  return shape;
}

std::vector<ShardPiece> shard_pieces(const ShardSpec& spec) {
  const int64_t L = spec.shard_length();
  std::vector<ShardPiece> pieces;
  if (spec.blocks == 1) {
    const int64_t begin = int64_t(spec.rank) * L;
    const int64_t real = std::max<int64_t>(0, std::min(L, spec.full_length() - begin));
    if (real > 0) pieces.push_back({0, begin, real});
    return pieces;
  }
  const int64_t block = spec.full_length() / spec.blocks, per_rank = block / spec.size;
  for (int64_t b = 0; b < spec.blocks; ++b) pieces.push_back({b * per_rank, b * block + spec.rank * per_rank, per_rank});
  return pieces;
}

Tensor shard_of(const Tensor& full, const ShardSpec& spec) {
  TRIREME_CHECK(full.sizes() == spec.full_shape, "shard_of: tensor ", full.sizes(), " is not the full parameter of ",
                spec.str());
  NoGradGuard no_grad;
  Tensor out = zeros(shard_shape(spec), full.dtype(), full.device());
  for (const ShardPiece& p : shard_pieces(spec)) {
    Tensor dst = narrow(out, spec.dim, p.local, p.length);
    copy_(dst, narrow(full.detach(), spec.dim, p.full, p.length));
  }
  return out;
}

Tensor unshard(const std::vector<Tensor>& shards, const ShardSpec& spec) {
  TRIREME_CHECK(int(shards.size()) == spec.size, "unshard: ", shards.size(), " shards for ", spec.str());
  NoGradGuard no_grad;
  const DType dtype = shards.at(0).dtype();
  Tensor full = zeros(spec.full_shape, dtype, shards[0].device());
  for (int r = 0; r < spec.size; ++r) {
    ShardSpec s = spec;
    s.rank = r;
    TRIREME_CHECK(shards[size_t(r)].sizes() == shard_shape(s), "unshard: shard ", r, " is ", shards[size_t(r)].sizes(),
                  " but ", s.str(), " is ", shard_shape(s));
    for (const ShardPiece& p : shard_pieces(s)) {
      Tensor dst = narrow(full, spec.dim, p.full, p.length);
      copy_(dst, narrow(shards[size_t(r)].detach(), spec.dim, p.local, p.length));
    }
  }
  return full;
}

Tensor gather_shards(const Tensor& shard, const ShardSpec& spec, dist::ProcessGroup* group) {
  if (spec.size == 1) return unshard({shard}, spec);
  TRIREME_CHECK(group != nullptr && group->size() == spec.size, "gather_shards: needs the group of the ", spec.size,
                " ranks of ", spec.str());
  Tensor input = contiguous(shard.detach());
  Tensor all = Tensor::empty({int64_t(spec.size) * input.numel()}, input.dtype(), input.device());
  group->all_gather(all, input)->wait();
  std::vector<Tensor> shards;
  for (int r = 0; r < spec.size; ++r) shards.push_back(view(narrow(all, 0, r * input.numel(), input.numel()), input.sizes()));
  return unshard(shards, spec);
}

namespace {
template <class Init>
void init_pieces(Tensor& shard, const ShardSpec& spec, const char* op, Init&& init) {
  TRIREME_CHECK(shard.sizes() == shard_shape(spec), op, ": shard ", shard.sizes(), " does not have the shape ",
                shard_shape(spec), " of ", spec.str());
  nn::init_constant(shard, 0.0);  // padding rows
  for (const ShardPiece& p : shard_pieces(spec)) {
    Tensor part = narrow(shard.detach(), spec.dim, p.local, p.length);
    Shape offsets(spec.full_shape.size(), 0);
    offsets[size_t(spec.dim)] = p.full;
    init(part, offsets);
  }
}
}  // namespace

void init_shard_normal(Tensor& shard, const ShardSpec& spec, double std, uint64_t seed, const std::string& name) {
  init_pieces(shard, spec, "init_shard_normal", [&](Tensor& part, const Shape& offsets) {
    nn::init_normal(part, std, seed, name, spec.full_shape, offsets);
  });
}

void init_shard_uniform(Tensor& shard, const ShardSpec& spec, double low, double high, uint64_t seed,
                        const std::string& name) {
  init_pieces(shard, spec, "init_shard_uniform", [&](Tensor& part, const Shape& offsets) {
    nn::init_uniform(part, low, high, seed, name, spec.full_shape, offsets);
  });
}

}  // namespace trireme::parallel
