// `trireme export hf` of LoRA runs: a checkpoint with adapters is refused without --merge (exit
// 2, saying why); with --merge its adapters are folded into the weights; --adapters folds a
// run's adapters.safetensors into its base checkpoint, giving the same weights; adapters made
// for another base model are refused (exit 2) naming the tensor, and nothing is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "dist/parallel_cli.h"
#include "trireme/io/safetensors.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

class LoraExport : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("trireme_lora_export_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
  }
  void TearDown() override { fs::remove_all(root_); }
  Result train(const std::string& name, const std::string& extra) {
    return run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.steps=6 --set train.out_dir=" +
                   (root_ / name).string() + " " + extra);
  }
  fs::path root_;
};

}  // namespace

TEST_F(LoraExport, MergeFoldsAdaptersAndAdaptersFileGivesTheSameWeights) {
  ASSERT_EQ(train("base", "").status, 0);
  const std::string lora = "--init-from " + (root_ / "base").string() + " --set lora.rank=2 --set optim.lr=0.01";
  Result r = train("lora", lora);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_cli("export hf " + (root_ / "lora").string() + " -o " + (root_ / "hf_refused").string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--merge"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(root_ / "hf_refused"));
  r = run_cli("export hf " + (root_ / "lora").string() + " -o " + (root_ / "hf_merged").string() + " --merge");
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path adapters = root_ / "lora" / "checkpoints" / "step_00000006" / "adapters.safetensors";
  ASSERT_TRUE(fs::exists(adapters));
  r = run_cli("export hf " + (root_ / "base").string() + " -o " + (root_ / "hf_from_file").string() +
              " --merge --adapters " + adapters.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto a = io::load_safetensors((root_ / "hf_merged" / "model.safetensors").string());
  const auto b = io::load_safetensors((root_ / "hf_from_file" / "model.safetensors").string());
  const auto base = io::load_safetensors((root_ / "base" / "checkpoints" / "step_00000006" / "model.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    EXPECT_EQ(name.find("lora"), std::string::npos) << name;
    EXPECT_EQ(t.to_vector<float>(), b.tensors.at(name).to_vector<float>()) << name;
  }
  // The merge changed the adapted weights (the base's, in trireme's layout, have the same values).
  auto sorted = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_NE(sorted(a.tensors.at("transformer.h.0.mlp.c_fc.weight").to_vector<float>()),
            sorted(base.tensors.at("transformer.h.0.mlp.c_fc.weight").to_vector<float>()));
  EXPECT_EQ(sorted(a.tensors.at("transformer.h.0.ln_1.weight").to_vector<float>()),
            sorted(base.tensors.at("transformer.h.0.ln_1.weight").to_vector<float>()));
}

TEST_F(LoraExport, AdaptersForAnotherBaseModelAreRefused) {
  ASSERT_EQ(train("base", "").status, 0);
  ASSERT_EQ(train("wide", "--set model.d_model=64").status, 0);
  Result r = train("lora", "--init-from " + (root_ / "base").string() + " --set lora.rank=2");
  ASSERT_EQ(r.status, 0) << r.output;
  const fs::path adapters = root_ / "lora" / "checkpoints" / "step_00000006" / "adapters.safetensors";
  r = run_cli("export hf " + (root_ / "wide").string() + " -o " + (root_ / "hf").string() + " --merge --adapters " +
              adapters.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("another base model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(".lora"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(root_ / "hf"));
}
