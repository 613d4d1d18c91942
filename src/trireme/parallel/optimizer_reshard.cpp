// Optimizer state reassembled from another layout's ranks and cut for this one (see
// optimizer_reshard.h, Note [resuming in another layout]).
#include "trireme/parallel/optimizer_reshard.h"

#include <cstring>

#include "trireme/autograd/grad_mode.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::parallel {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "state.<param>.<key>" -> (param, key); the param name may contain dots, the key does not.
std::optional<std::pair<std::string, std::string>> split_state_key(const std::string& key) {
  if (!starts_with(key, "state.")) return std::nullopt;
  const std::string rest = key.substr(6);
  const size_t dot = rest.rfind('.');
  TRIREME_CHECK(dot != std::string::npos && dot > 0, "optimizer state: malformed key '", key, "'");
  return std::pair{rest.substr(0, dot), rest.substr(dot + 1)};
}

// A ZeRO-1 piece's name "<param>[<begin>:<end>]" (zero.h) -> (param, begin, end).
struct ZeroRange {
  std::string param;
  int64_t begin = 0, end = 0;
};
ZeroRange parse_zero_range(const std::string& name) {
  const size_t open = name.rfind('['), colon = name.rfind(':');
  TRIREME_CHECK(!name.empty() && name.back() == ']' && open != std::string::npos && colon != std::string::npos &&
                    open < colon,
                "optimizer state: '", name, "' is not a ZeRO-1 piece name <param>[<begin>:<end>]");
  ZeroRange r{name.substr(0, open), 0, 0};
  try {
    r.begin = std::stoll(name.substr(open + 1, colon - open - 1));
    r.end = std::stoll(name.substr(colon + 1, name.size() - colon - 2));
  } catch (const std::exception&) {
    TRIREME_FAIL("optimizer state: '", name, "' has no numeric element range");
  }
  TRIREME_CHECK(0 <= r.begin && r.begin < r.end, "optimizer state: '", name, "' has an empty or negative range");
  return r;
}


// One state tensor of one parameter as one tp rank held it, being assembled.
struct TpPiece {
  Tensor t;                       // the tp shard (or the whole parameter when replicated)
  std::vector<uint8_t> covered;   // ZeRO: which flat elements some dp rank supplied
};

}  // namespace

std::map<std::string, Tensor> whole_optimizer_state(const std::function<NamedTensorList(int rank)>& rank_state,
                                                    const SavedLayout& old, const ShardRule& rule,
                                                    const std::map<std::string, Shape>& full_shapes) {
  TRIREME_CHECK(old.dp >= 1 && old.tp >= 1 && old.pp >= 1, "optimizer state: layout dp ", old.dp, " tp ", old.tp,
                " pp ", old.pp);
  std::map<std::string, Tensor> out;
  // (param, key) -> per tp rank: the shard as that rank held it.
  std::map<std::pair<std::string, std::string>, std::map<int, TpPiece>> pieces;
  auto held_shape = [&](const std::string& param, int tp_rank) -> Shape {
    if (auto spec = rule(param, tp_rank)) return shard_shape(*spec);
    auto it = full_shapes.find(param);
    TRIREME_CHECK(it != full_shapes.end(), "optimizer state: parameter '", param, "' is not in the model");
    return it->second;
  };
  NoGradGuard no_grad;
  for (int r = 0; r < old.world_size(); ++r) {
    const int tp_rank = r % old.tp, dp_rank = r / (old.tp * old.pp);
    if (old.zero == 0 && dp_rank > 0) continue;  // replicas of dp rank 0's state
    const NamedTensorList state = rank_state(r);
    for (const auto& [key, t] : state) {
      if (r == 0 && !starts_with(key, "state.") && !starts_with(key, "zero.")) out[key] = t;
      auto split = split_state_key(key);
      if (!split) continue;
      const auto& [name, skey] = *split;
      if (old.zero == 0) {
        pieces[{name, skey}].try_emplace(tp_rank, TpPiece{t, {}});  // a tied copy: the first wins
        continue;
      }
      const ZeroRange z = parse_zero_range(name);
      TpPiece& p = pieces[{z.param, skey}][tp_rank];
      if (!p.t.defined()) {
        p.t = zeros(held_shape(z.param, tp_rank), t.dtype());
        p.covered.assign(size_t(p.t.numel()), 0);
      }
      TRIREME_CHECK(z.end <= p.t.numel() && t.numel() == z.end - z.begin, "optimizer state: '", key,
                    "' (", t.numel(), " elements) does not fit '", z.param, "' held as ", p.t.sizes(), " on tp rank ",
                    tp_rank);
      Tensor flat = reshape(p.t, {-1});
      Tensor dst = narrow(flat, 0, z.begin, z.end - z.begin);
      copy_(dst, reshape(t, {-1}));
      std::memset(p.covered.data() + z.begin, 1, size_t(z.end - z.begin));
    }
  }
  for (auto& [id, by_rank] : pieces) {
    const auto& [param, skey] = id;
    for (const auto& [tp_rank, p] : by_rank) {
      for (size_t i = 0; i < p.covered.size(); ++i) {
        TRIREME_CHECK(p.covered[i], "optimizer state: element ", i, " of '", param, "' (", skey, ", tp rank ", tp_rank,
                      ") is in no dp rank's ZeRO-1 shard");
      }
    }
    auto spec = rule(param, 0);
    if (!spec) {
      out["state." + param + "." + skey] = by_rank.begin()->second.t;
      continue;
    }
    std::vector<Tensor> shards;
    for (int t = 0; t < old.tp; ++t) {
      auto it = by_rank.find(t);
      TRIREME_CHECK(it != by_rank.end(), "optimizer state: no rank of tp rank ", t, " holds '", param, "' (", skey, ")");
      shards.push_back(view(it->second.t, shard_shape(*rule(param, t))));
    }
    out["state." + param + "." + skey] = unshard(shards, *spec);
  }
  return out;
}

std::map<std::string, Tensor> shard_optimizer_state(const std::map<std::string, Tensor>& whole,
                                                    const NamedTensorList& params,
                                                    const std::map<std::string, ShardSpec>& tp_specs) {
  std::map<std::string, Tensor> out;
  std::map<std::string, std::vector<std::pair<std::string, Tensor>>> by_param;
  for (const auto& [key, t] : whole) {
    if (auto split = split_state_key(key)) by_param[split->first].emplace_back(split->second, t);
    else out[key] = t;
  }
  for (const auto& [name, p] : params) {
    auto it = by_param.find(name);
    if (it == by_param.end()) continue;
    auto spec = tp_specs.find(name);
    for (const auto& [skey, t] : it->second) {
      out["state." + name + "." + skey] = spec == tp_specs.end() ? t : shard_of(t, spec->second);
    }
  }
  return out;
}

}  // namespace trireme::parallel
