// `trireme estimate`: one entry per rank in world-rank order with its parts and peak, pipeline
// stages that differ (the first holds the embedding, the last the head), ZeRO's sharded state and
// recomputation's smaller activations, the capacity beside it and whether the run fits; bad
// flags and layouts exit 2 naming what was wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.h"
#include "trireme/io/tokenizer.h"

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

nlohmann::json estimate(const std::string& args) {
  Result r = run("estimate --json --vocab 3000 --set model.d_model=256 --set model.n_layer=4 " + args);
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

double peak(const nlohmann::json& j, size_t rank) { return j["ranks"][rank]["peak_bytes"].get<double>(); }
double part(const nlohmann::json& j, size_t rank, const char* name) {
  return j["ranks"][rank]["parts"][name].get<double>();
}

}  // namespace

TEST(Estimate, EveryRankInWorldOrderWithItsParts) {
  const auto j = estimate("--nproc 8 --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 "
                          "--set parallel.micro_batches=2 --set train.batch_size=8");
  ASSERT_EQ(j["ranks"].size(), 8u);
  for (size_t r = 0; r < 8; ++r) {
    EXPECT_EQ(j["ranks"][r]["rank"].get<int>(), int(r));
    EXPECT_EQ(j["ranks"][r]["tp"].get<int>(), int(r % 2));  // tp fastest, then pp, then dp
    EXPECT_EQ(j["ranks"][r]["pp"].get<int>(), int(r / 2 % 2));
    EXPECT_EQ(j["ranks"][r]["dp"].get<int>(), int(r / 4));
    for (const char* p : {"weights", "gradients", "optimizer", "activations", "communication"}) {
      EXPECT_TRUE(j["ranks"][r]["parts"].contains(p)) << p;
    }
  }
  EXPECT_EQ(peak(j, 0), peak(j, 1));  // tp ranks of one stage alike
  EXPECT_EQ(peak(j, 0), peak(j, 4));  // dp replicas alike
  EXPECT_NE(part(j, 0, "weights"), part(j, 2, "weights"));  // stage 0 has wpe, stage 1 ln_f
  // The executor keeps a step's transfers: stage 0 what it sends, stage 1 what it receives and
  // the gradients it sends back.
  EXPECT_GT(part(j, 0, "communication"), 0.0);
  EXPECT_DOUBLE_EQ(part(j, 2, "communication"), 2 * part(j, 0, "communication"));
}

TEST(Estimate, SplitsShardingAndRecomputationShrinkTheirParts) {
  const auto one = estimate("");
  const auto tp2 = estimate("--nproc 2 --set parallel.tp=2");
  EXPECT_LT(part(tp2, 0, "weights"), 0.6 * part(one, 0, "weights"));
  const auto dp2 = estimate("--nproc 2"), zero = estimate("--nproc 2 --set parallel.zero=true");
  EXPECT_DOUBLE_EQ(part(zero, 0, "optimizer"), part(dp2, 0, "optimizer") / 2);
  EXPECT_GT(part(zero, 0, "communication"), 0.0);
  const auto recompute = estimate("--set memory.recompute=full --set model.block_size=256");
  const auto plain = estimate("--set model.block_size=256");
  EXPECT_LT(part(recompute, 0, "activations"), 0.5 * part(plain, 0, "activations"));
}

TEST(Estimate, SaysWhetherItFitsTheGivenCapacity) {
  auto small = estimate("--device-memory 0.01");
  EXPECT_FALSE(small["fits"].get<bool>());
  EXPECT_DOUBLE_EQ(small["capacity_bytes"].get<double>(), 0.01 * (1 << 30));
  EXPECT_TRUE(estimate("--device-memory 64")["fits"].get<bool>());
  Result text = run("estimate --vocab 3000 --device-memory 0.01");
  EXPECT_EQ(text.status, 0) << text.out;
  EXPECT_CONTAINS(text.out, "does not fit");
  EXPECT_CONTAINS(text.out, "peak");
}

TEST(Estimate, BadInputExits2NamingIt) {
  Result nproc = run("estimate --nproc 3 --set parallel.tp=2");
  EXPECT_EQ(nproc.status, 2);
  EXPECT_CONTAINS(nproc.out, "--nproc 3");
  Result key = run("estimate --set memory.recompute=some");
  EXPECT_EQ(key.status, 2);
  EXPECT_CONTAINS(key.out, "memory.recompute");
  Result mem = run("estimate --device-memory lots");
  EXPECT_EQ(mem.status, 2);
  EXPECT_CONTAINS(mem.out, "--device-memory");
}

// Before the data is prepared, the estimate takes the vocabulary the run will have: the character
// tokenizer that preparing trains on the corpus; a BPE vocabulary is not known before training.
TEST(Estimate, UnpreparedDataGivesTheCorpusVocabulary) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trireme_estimate_vocab_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Result prepared = run("prepare --out " + (dir / "data").string());
  ASSERT_EQ(prepared.status, 0) << prepared.out;
  const int64_t vocab = trireme::io::load_tokenizer((dir / "data" / "tokenizer.json").string())->vocab_size();
  Result r = run("estimate --json --set train.out_dir=" + (dir / "unprepared").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["vocab_size"].get<int64_t>(), vocab);
  Result bpe = run("estimate --json --set data.tokenizer=bpe --set train.out_dir=" + (dir / "unprepared").string());
  ASSERT_EQ(bpe.status, 0) << bpe.out;
  EXPECT_TRUE(nlohmann::json::parse(bpe.out)["vocab_size"].is_null());
  fs::remove_all(dir);
}
