// `trireme train --init-from`: a new run starts from another run's model weights (at a learning
// rate of 1e-12 its first checkpoint holds them), also from a Hugging Face folder trained on its
// own tokenizer's ids; a checkpoint of another model or another vocabulary is refused naming
// what differs, and --init-from with --resume is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.h"
#include "tiny_trainer_config.h"
#include "trireme/io/safetensors.h"

namespace fs = std::filesystem;

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

const std::string kModel = " --set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.block_size=16 "
                           "--set train.batch_size=4 --set train.eval_interval=0 --set train.threads=1 --set schedule.kind=constant --set schedule.warmup_steps=0";

std::string corpus(const fs::path& dir) {
  const fs::path p = dir / "corpus.txt";
  std::ofstream f(p);
  for (int i = 0; i < 60; ++i) f << "床前明月光，疑是地上霜。举头望明月，低头思故乡。The moon, the frost, home.\n";
  return p.string();
}

std::string latest_model(const fs::path& run) {
  std::string newest;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.is_directory() && e.path().filename().string() > newest) newest = e.path().filename().string();
  return (run / "checkpoints" / newest / "model.safetensors").string();
}

void expect_same_tensors(const std::string& a, const std::string& b) {
  auto fa = trireme::io::load_safetensors(a), fb = trireme::io::load_safetensors(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.tensors.count(name)) << name;
    const auto x = t.to_vector<float>(), y = fb.tensors.at(name).to_vector<float>();
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-6) << name << "[" << i << "]";
  }
}

class InitFrom : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = trireme::testing::fresh_run_dir("init_from_cli");
    fs::create_directories(dir_);
    corpus_ = corpus(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string corpus_;
};

TEST_F(InitFrom, StartsFromTheOtherRunsWeights) {
  const std::string data = " --set data.corpus=" + corpus_;
  Result a = run("train" + kModel + data + " --set train.steps=4 --set train.out_dir=" + (dir_ / "a").string());
  ASSERT_EQ(a.status, 0) << a.out;
  // At a learning rate of 1e-12 one step changes nothing visible: b's checkpoint is a's weights.
  Result b = run("train" + kModel + data + " --set train.steps=1 --set optim.lr=1e-12 --set schedule.min_lr=0 --set train.out_dir=" +
                 (dir_ / "b").string() + " --init-from " + (dir_ / "a").string());
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_CONTAINS(b.out, "init: the model's weights from");
  expect_same_tensors(latest_model(dir_ / "a"), latest_model(dir_ / "b"));
  // With data parallelism and ZeRO-3 alike.
  Result c = run("train" + kModel + data + " --set train.steps=1 --set optim.lr=1e-12 --set schedule.min_lr=0 --nproc 2 --set parallel.zero=3 "
                 "--set train.out_dir=" + (dir_ / "c").string() + " --init-from " + (dir_ / "a").string());
  ASSERT_EQ(c.status, 0) << c.out;
  expect_same_tensors(latest_model(dir_ / "a"), latest_model(dir_ / "c"));

  Result wider = run("train" + kModel + data + " --set model.d_model=64 --set train.steps=1 --set train.out_dir=" +
                     (dir_ / "d").string() + " --init-from " + (dir_ / "a").string());
  EXPECT_EQ(wider.status, 2) << wider.out;
  EXPECT_CONTAINS(wider.out, "in this run's model");
  EXPECT_CONTAINS(wider.out, "the checkpoint's model: arch = \"gpt2\", d_model = 32");
  Result both = run("train" + kModel + data + " --resume --init-from " + (dir_ / "a").string() + " --set train.out_dir=" +
                    (dir_ / "a").string());
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_CONTAINS(both.out, "give one of them");
}

TEST_F(InitFrom, AHuggingFaceFolderOnItsOwnTokenizer) {
  const std::string hf = std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/gpt2";
  const std::string model = " --set model.d_model=64 --set model.n_layer=2 --set model.n_head=4 --set model.block_size=64 "
                            "--set model.bias=true --set train.batch_size=2 --set train.eval_interval=0 --set train.threads=1 "
                            "--set schedule.kind=constant --set schedule.warmup_steps=0";
  Result other_vocab = run("train" + model + " --set data.corpus=" + corpus_ + " --set train.steps=1 --set train.out_dir=" +
                           (dir_ / "e").string() + " --init-from " + hf);
  EXPECT_EQ(other_vocab.status, 2) << other_vocab.out;
  EXPECT_CONTAINS(other_vocab.out, "data.tokenizer_file");
  Result r = run("train" + model + " --set data.corpus=" + corpus_ + " --set data.tokenizer_file=" + hf +
                 "/tokenizer.json --set train.steps=1 --set optim.lr=1e-12 --set schedule.min_lr=0 --set train.out_dir=" + (dir_ / "f").string() +
                 " --init-from " + hf);
  ASSERT_EQ(r.status, 0) << r.out;
  // The same weights as importing the folder.
  Result imported = run("import hf " + hf + " -o " + (dir_ / "imported").string());
  ASSERT_EQ(imported.status, 0) << imported.out;
  expect_same_tensors(latest_model(dir_ / "imported"), latest_model(dir_ / "f"));
}

}  // namespace
