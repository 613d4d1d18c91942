// `trireme import hf` and `export hf` on bad input: exit status 2, one line naming what is wrong,
// and nothing written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../cli/run_command.h"
#include "hf_fixtures.h"
#include "trireme/io/safetensors.h"
#include "trireme/ops/factory.h"

namespace trireme {
namespace {

namespace fs = std::filesystem;
using cli_testing::run;

class HfImportRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    base = test::fresh_test_dir("trireme_hf_refusal_");
    fs::copy(test::hf_fixture("qwen2"), base / "model");
  }
  void TearDown() override { fs::remove_all(base); }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = test::read_json((base / "model" / "config.json").string());
    edit(j);
    std::ofstream(base / "model" / "config.json") << j.dump();
  }
  // Runs the import and checks it was refused with `needle` in the message and nothing written.
  void expect_refused(const std::string& needle) {
    const auto r = run("import hf " + (base / "model").string() + " -o " + (base / "out").string());
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(base / "out")) << "a refused import left " << (base / "out");
  }
  fs::path base;
};

TEST_F(HfImportRefusal, UnknownArchitecture) {
  edit_config([](nlohmann::json& j) { j["architectures"] = {"MambaForCausalLM"}; });
  expect_refused("MambaForCausalLM");
}

TEST_F(HfImportRefusal, ShapesThatDisagreeWithTheConfig) {
  edit_config([](nlohmann::json& j) { j["intermediate_size"] = 128; });
  expect_refused("mlp.gate_proj.weight");
}

TEST_F(HfImportRefusal, MoreLayersInTheFileThanTheConfig) {
  edit_config([](nlohmann::json& j) { j["num_hidden_layers"] = 1; });
  expect_refused("model.layers.1.");
}

TEST_F(HfImportRefusal, AnIntegerKeyGivenAsAFloat) {
  edit_config([](nlohmann::json& j) { j["num_hidden_layers"] = 1e300; });  // no defined conversion to int64
  expect_refused("\"num_hidden_layers\" must be an integer");
}

TEST_F(HfImportRefusal, RopeScaling) {
  edit_config([](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_refused("rope");
}

TEST_F(HfImportRefusal, UnsupportedDtype) {
  io::save_safetensors((base / "model" / "model.safetensors").string(), {{"model.embed_tokens.weight", zeros({4}, DType::i32)}});
  expect_refused("I32");
}

TEST_F(HfImportRefusal, UnsupportedTokenizer) {
  nlohmann::json t = test::read_json((base / "model" / "tokenizer.json").string());
  t["model"]["type"] = "Unigram";
  std::ofstream(base / "model" / "tokenizer.json") << t.dump();
  expect_refused("Unigram");
}

TEST_F(HfImportRefusal, ExistingOutputFolders) {
  fs::create_directories(base / "out");
  std::ofstream(base / "out" / "keep.txt") << "mine";
  auto r = run("import hf " + (base / "model").string() + " -o " + (base / "out").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("exists"), std::string::npos) << r.out;
  fs::remove_all(base / "out");
  ASSERT_EQ(run("import hf " + (base / "model").string() + " -o " + (base / "ckpt").string()).status, 0);
  r = run("export hf " + (base / "ckpt").string() + " -o " + (base / "model").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("exists"), std::string::npos) << r.out;
  ASSERT_EQ(run("export hf " + (base / "ckpt").string() + " -o " + (base / "exported").string()).status, 0);
  EXPECT_TRUE(fs::exists(base / "exported" / "config.json"));
  for (const auto& e : fs::directory_iterator(base))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << "left " << e.path();
}

}  // namespace
}  // namespace trireme
