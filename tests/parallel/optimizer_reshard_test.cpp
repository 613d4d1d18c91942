// Optimizer state across layouts without processes (Note [resuming in another layout]): a whole
// AdamW state cut into the rank files of tp x dp with ZeRO-1 and of tp x pp comes back whole bit
// for bit (padded vocabulary, fused q|k|v and the pipeline's tied-weight copy included), and a
// missing ZeRO-1 range or rank is an error naming the parameter.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trireme/core/error.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"
#include "trireme/parallel/optimizer_reshard.h"

using namespace trireme;
using namespace trireme::parallel;

namespace {

models::GPTConfig tiny_config() {
  return {.vocab_size = 61, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 16, .tie_embeddings = true};
}

struct Whole {
  NamedTensorList params;  // names and single-process shapes
  std::map<std::string, Tensor> state;
  std::map<std::string, Shape> shapes;
};

Whole random_whole_state() {
  models::GPT gpt(tiny_config(), 1);
  Whole w;
  w.params = gpt.named_parameters();
  Generator gen(3);
  for (const auto& [name, p] : w.params) {
    w.shapes[name] = p.sizes();
    w.state["state." + name + ".exp_avg"] = randn(p.sizes(), gen);
    w.state["state." + name + ".exp_avg_sq"] = rand(p.sizes(), gen);
  }
  w.state["step"] = full({1}, 6.0, DType::i64);
  w.state["lr"] = full({1}, 3e-3, DType::f64);
  return w;
}

std::map<std::string, ShardSpec> specs_for(const ShardRule& rule, const NamedTensorList& params, int tp_rank) {
  std::map<std::string, ShardSpec> out;
  for (const auto& [name, p] : params)
    if (auto s = rule(name, tp_rank)) out[name] = *s;
  return out;
}

// Rank files of dp x tp with ZeRO-1: each tp shard's flat elements split at an uneven point
// between the two dp ranks, named as ZeroOptimizer names its pieces.
std::vector<NamedTensorList> zero_files(const Whole& w, const ShardRule& rule, int tp, bool drop_one_range) {
  std::vector<NamedTensorList> files(size_t(2 * tp));
  for (int r = 0; r < 2 * tp; ++r) {
    const int tp_rank = r % tp, dp_rank = r / tp;
    auto mine = shard_optimizer_state(w.state, w.params, specs_for(rule, w.params, tp_rank));
    NamedTensorList& f = files[size_t(r)];
    f.emplace_back("step", mine.at("step"));
    f.emplace_back("lr", mine.at("lr"));
    for (const auto& [name, p] : w.params) {
      for (const char* key : {"exp_avg", "exp_avg_sq"}) {
        Tensor flat = reshape(contiguous(mine.at("state." + name + "." + key)), {-1});
        const int64_t n = flat.numel(), cut = n / 3 + 1;
        const int64_t begin = dp_rank == 0 ? 0 : cut, end = dp_rank == 0 ? cut : n;
        if (drop_one_range && r == 2 * tp - 1 && name == "transformer.h.1.mlp.c_fc.weight") continue;
        f.emplace_back(str_cat("state.", name, "[", begin, ":", end, "].", key),
                       contiguous(narrow(flat, 0, begin, end - begin)));
      }
    }
    f.emplace_back("zero.dp_rank", full({1}, double(dp_rank), DType::i64));
    f.emplace_back("zero.dp_size", full({1}, 2.0, DType::i64));
  }
  return files;
}

void expect_same(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << key;
    ASSERT_EQ(got.at(key).sizes(), t.sizes()) << key;
    EXPECT_EQ(got.at(key).dtype(), t.dtype()) << key;
    EXPECT_EQ(to_dtype(got.at(key), DType::f64).to_vector<double>(), to_dtype(t, DType::f64).to_vector<double>()) << key;
  }
}

}  // namespace

TEST(OptimizerReshard, ZeroShardsOverTensorParallelComeBackWhole) {
  const Whole w = random_whole_state();
  const ShardRule rule = models::gpt_shard_rule(tiny_config(), 2);
  ASSERT_TRUE(rule("transformer.h.1.attn.c_attn.weight", 1));  // the fused q|k|v of a later block
  ASSERT_FALSE(rule("transformer.h.1.ln_1.weight", 0));
  const auto files = zero_files(w, rule, 2, false);
  auto whole = whole_optimizer_state([&](int r) { return files.at(size_t(r)); }, {.dp = 2, .tp = 2, .zero = true}, rule,
                                     w.shapes);
  expect_same(whole, w.state);
}

TEST(OptimizerReshard, PipelineStagesOverTensorParallelComeBackWhole) {
  const Whole w = random_whole_state();
  const ShardRule rule = models::gpt_shard_rule(tiny_config(), 2);
  // pp = 2: stage 0 the first half of the parameters, stage 1 the rest plus its copy of the tied
  // embedding (the same values, Note [pipeline tied embeddings]); mesh (pp, tp), tp fastest.
  const size_t half = w.params.size() / 2;
  std::vector<NamedTensorList> files(4);
  for (int r = 0; r < 4; ++r) {
    const int tp_rank = r % 2, pp_rank = r / 2;
    NamedTensorList held;
    for (size_t i = 0; i < w.params.size(); ++i) {
      const bool tied = w.params[i].first == "transformer.wte.weight";
      if ((pp_rank == 0) == (i < half) || (tied && pp_rank == 1)) held.push_back(w.params[i]);
    }
    for (auto& kv : shard_optimizer_state(w.state, held, specs_for(rule, held, tp_rank))) files[size_t(r)].push_back(kv);
  }
  auto whole = whole_optimizer_state([&](int r) { return files.at(size_t(r)); }, {.tp = 2, .pp = 2}, rule, w.shapes);
  expect_same(whole, w.state);
}

TEST(OptimizerReshard, MissingPiecesAreErrorsNamingTheParameter) {
  const Whole w = random_whole_state();
  const ShardRule rule = models::gpt_shard_rule(tiny_config(), 2);
  const auto files = zero_files(w, rule, 2, true);
  try {
    whole_optimizer_state([&](int r) { return files.at(size_t(r)); }, {.dp = 2, .tp = 2, .zero = true}, rule, w.shapes);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'transformer.h.1.mlp.c_fc.weight'"), std::string::npos) << e.what();
  }
}
