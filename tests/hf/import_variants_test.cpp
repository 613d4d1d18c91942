// The forms a Hugging Face folder comes in: GPT2Model naming (no "transformer." prefix, no head,
// causal-mask buffers), BF16 weights, and a sharded index missing a shard.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "hf_fixtures.h"
#include "trireme/io/config.h"
#include "trireme/io/safetensors.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/train/hf_checkpoint.h"

namespace trireme {
namespace {

namespace fs = std::filesystem;

class HfImportVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    base = test::fresh_test_dir("trireme_hf_variants_");
  }
  void TearDown() override { fs::remove_all(base); }
  fs::path copy_of(const std::string& kind) {
    fs::copy(test::hf_fixture(kind), base / kind);
    return base / kind;
  }
  fs::path base;
};

void expect_same_weights(const train::HfModel& a, const train::HfModel& b) {
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, t] : a.weights) {
    ASSERT_TRUE(b.weights.contains(name)) << name;
    EXPECT_EQ(contiguous(t).to_vector<float>(), contiguous(b.weights.at(name)).to_vector<float>()) << name;
  }
}

TEST_F(HfImportVariants, Gpt2ModelNamingWithMaskBuffers) {
  const fs::path dir = copy_of("gpt2");
  io::SafetensorsFile f = io::load_safetensors((dir / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> renamed;
  for (const auto& [name, t] : f.tensors) {
    if (name == "lm_head.weight") continue;
    renamed.emplace_back(name.substr(std::string("transformer.").size()), t);
  }
  for (int i = 0; i < 2; ++i) renamed.emplace_back("h." + std::to_string(i) + ".attn.bias", ones({1, 1, 64, 64}));
  io::save_safetensors((dir / "model.safetensors").string(), renamed);
  expect_same_weights(train::read_hf_model(test::hf_fixture("gpt2")), train::read_hf_model(dir));
}

TEST_F(HfImportVariants, Bf16WeightsAreReadAsFloat32) {
  const fs::path dir = copy_of("qwen2");
  io::SafetensorsFile f = io::load_safetensors((dir / "model.safetensors").string());
  std::vector<std::pair<std::string, Tensor>> bf16;
  for (const auto& [name, t] : f.tensors) bf16.emplace_back(name, to_dtype(t, DType::bf16));
  io::save_safetensors((dir / "model.safetensors").string(), bf16);
  const train::HfModel m = train::read_hf_model(dir);
  const train::HfModel want = train::read_hf_model(test::hf_fixture("qwen2"));
  for (const auto& [name, t] : want.weights) {
    EXPECT_EQ(m.weights.at(name).dtype(), DType::f32);
    EXPECT_EQ(contiguous(m.weights.at(name)).to_vector<float>(),
              contiguous(to_dtype(to_dtype(t, DType::bf16), DType::f32)).to_vector<float>())
        << name;
  }
}

TEST_F(HfImportVariants, MissingShardIsNamed) {
  const fs::path dir = copy_of("llama");
  fs::remove(dir / "model-00002-of-00003.safetensors");
  try {
    train::read_hf_model(dir);
    ADD_FAILURE() << "a folder missing a shard was read";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model-00002-of-00003.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trireme
