// Checkpoint integrity: checksums and steps recorded in state.json are verified on load, the
// optimizer file must hold what an optimizer needs, JSON errors name the file and key, rotation
// never deletes the only complete checkpoint or a newer one, and a model-only load needs no
// optimizer file.
#include <gtest/gtest.h>

#include "expect_error.h"
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"
#include "trireme/io/safetensors.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/train/checkpoint.h"

using namespace trireme;
using namespace trireme::train;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("trireme_integrity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Tensor scalar_i64(int64_t v) {
  Tensor t = Tensor::empty({1}, DType::i64);
  t.data<int64_t>()[0] = v;
  return t;
}

// A one-process checkpoint as the trainer writes it: AdamW state for each model tensor.
Checkpoint adam_checkpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.model = {{"w", full({4, 8}, 1.5)}, {"b", full({8}, 0.25)}};
  c.optimizer = {{"step", scalar_i64(step)}, {"lr", full({1}, 1e-3, DType::f64)}};
  for (const char* p : {"w", "b"}) {
    const std::vector<int64_t> shape = std::string(p) == "w" ? std::vector<int64_t>{4, 8} : std::vector<int64_t>{8};
    c.optimizer.emplace_back(std::string("state.") + p + ".exp_avg", full(shape, 0.1));
    c.optimizer.emplace_back(std::string("state.") + p + ".exp_avg_sq", full(shape, 0.01));
  }
  c.state = {{"note", "test"}};
  return c;
}


nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(io::read_file(p)); }
void write_json(const fs::path& p, const nlohmann::json& j) { io::write_file(p, j.dump(2)); }

// Rewrites a tensor file of `dir` with `tensors` and records its new checksum, as a tool that
// edits checkpoints consistently would: only the content checks can catch what is wrong.
void rewrite_consistently(const fs::path& dir, const std::string& file, const NamedTensors& tensors) {
  const nlohmann::json state = read_json(dir / "state.json");
  const std::string bytes =
      io::serialize_safetensors(tensors, {{"trireme.step", std::to_string(state["step"].get<int64_t>())}});
  io::write_file(dir / file, bytes);
  nlohmann::json s = state;
  s["files"][file]["xxh3"] = checkpoint_checksum(bytes);
  s["files"][file].erase("tensors");
  write_json(dir / "state.json", s);
}

NamedTensors without(const NamedTensors& in, const std::string& name) {
  NamedTensors out;
  for (const auto& kv : in) {
    if (kv.first != name) out.push_back(kv);
  }
  return out;
}

}  // namespace

TEST(CheckpointIntegrity, StateRecordsChecksumAndStepPerFile) {
  fs::path root = fresh_dir("records");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  nlohmann::json state = read_json(dir / "state.json");
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(state["files"][f]["xxh3"], checkpoint_checksum(io::read_file(dir / f))) << f;
    EXPECT_EQ(state["files"][f]["step"], 30) << f;
  }
  Checkpoint c = load_checkpoint(dir);
  EXPECT_TRUE(c.verified);
  EXPECT_EQ(checkpoint_problem(dir), std::nullopt);
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, AFlippedByteIsRefusedNamingFileAndTensor) {
  fs::path root = fresh_dir("flip");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  std::string bytes = io::read_file(dir / "model.safetensors");
  bytes[bytes.size() - 3] ^= 0x10;  // in the last tensor's data
  io::write_file(dir / "model.safetensors", bytes);
  const std::string err = trireme::testing::error_message([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum"), std::string::npos) << err;
  EXPECT_NE(err.find("tensor b"), std::string::npos) << err;
  EXPECT_TRUE(checkpoint_problem(dir).has_value());
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, AStepThatDisagreesWithTheFolderIsRefused) {
  fs::path root = fresh_dir("step");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  for (int64_t wrong : {int64_t(25), int64_t(1000000000000000)}) {
    nlohmann::json state = read_json(dir / "state.json");
    state["step"] = wrong;
    write_json(dir / "state.json", state);
    const std::string err = trireme::testing::error_message([&] { load_checkpoint(dir); });
    EXPECT_NE(err.find("state.json"), std::string::npos) << err;
    EXPECT_NE(err.find("step_00000030"), std::string::npos) << err;
    EXPECT_NE(err.find(std::to_string(wrong)), std::string::npos) << err;
  }
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, AFileOfAnotherStepIsRefused) {
  fs::path root = fresh_dir("otherstep");
  fs::path d20 = save_checkpoint(root, adam_checkpoint(20), 0);
  fs::path d30 = save_checkpoint(root, adam_checkpoint(30), 0);
  fs::copy_file(d20 / "optimizer.safetensors", d30 / "optimizer.safetensors", fs::copy_options::overwrite_existing);
  // Even with the checksum made to match, the file says it is step 20's.
  nlohmann::json state = read_json(d30 / "state.json");
  state["files"]["optimizer.safetensors"]["xxh3"] = checkpoint_checksum(io::read_file(d30 / "optimizer.safetensors"));
  write_json(d30 / "state.json", state);
  const std::string err = trireme::testing::error_message([&] { load_checkpoint(d30); });
  EXPECT_NE(err.find("optimizer.safetensors belongs to step 20"), std::string::npos) << err;
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, AMissingOptimizerTensorIsRefusedNamingIt) {
  fs::path root = fresh_dir("missing");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  rewrite_consistently(dir, "optimizer.safetensors", without(adam_checkpoint(30).optimizer, "state.b.exp_avg_sq"));
  const std::string err = trireme::testing::error_message([&] { load_checkpoint_optimizer(dir, 0); });
  EXPECT_NE(err.find("optimizer.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("state.b.exp_avg_sq"), std::string::npos) << err;
  EXPECT_NE(checkpoint_problem(dir).value_or("").find("state.b.exp_avg_sq"), std::string::npos);

  // A whole parameter's state gone (nothing to compare within the file): the model says it is needed.
  rewrite_consistently(dir, "optimizer.safetensors",
                       without(without(adam_checkpoint(30).optimizer, "state.w.exp_avg_sq"), "state.w.exp_avg"));
  const std::string err2 = trireme::testing::error_message([&] { load_checkpoint_optimizer(dir, 0); });
  EXPECT_NE(err2.find("state.w.exp_avg"), std::string::npos) << err2;
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, AnOptimizerTensorOfTheWrongDtypeIsRefusedNamingIt) {
  fs::path root = fresh_dir("dtype");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  NamedTensors opt = adam_checkpoint(30).optimizer;
  for (auto& [n, t] : opt) {
    if (n == "state.w.exp_avg") t = zeros({4, 8}, DType::i32);
  }
  rewrite_consistently(dir, "optimizer.safetensors", opt);
  const std::string err = trireme::testing::error_message([&] { load_checkpoint_optimizer(dir, 0); });
  EXPECT_NE(err.find("optimizer.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("state.w.exp_avg"), std::string::npos) << err;
  EXPECT_NE(err.find("i32"), std::string::npos) << err;
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, JsonTypeErrorsNameFileAndKey) {
  fs::path root = fresh_dir("json");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  nlohmann::json state = read_json(dir / "state.json");
  state["step"] = "30";
  write_json(dir / "state.json", state);
  std::string err = trireme::testing::error_message([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("state.json"), std::string::npos) << err;
  EXPECT_NE(err.find("\"step\""), std::string::npos) << err;
  EXPECT_NE(err.find("string"), std::string::npos) << err;

  state["step"] = 30;
  state["files"]["model.safetensors"]["xxh3"] = 12;
  write_json(dir / "state.json", state);
  err = trireme::testing::error_message([&] { load_checkpoint(dir); });
  EXPECT_NE(err.find("files.model.safetensors.xxh3"), std::string::npos) << err;
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, OldCheckpointsWithoutChecksumsStillLoad) {
  fs::path root = fresh_dir("old");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  nlohmann::json state = read_json(dir / "state.json");
  state.erase("files");
  write_json(dir / "state.json", state);
  Checkpoint c = load_checkpoint(dir);
  EXPECT_FALSE(c.verified);
  EXPECT_EQ(c.step, 30);
  EXPECT_EQ(load_checkpoint_optimizer(dir, 0).size(), 6u);
  EXPECT_EQ(checkpoint_problem(dir), std::nullopt);
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, TheModelLoadsWithoutTheOptimizerFile) {
  fs::path root = fresh_dir("modelonly");
  fs::path dir = save_checkpoint(root, adam_checkpoint(30));
  fs::remove(dir / "optimizer.safetensors");
  EXPECT_EQ(load_checkpoint_model(dir).model.size(), 2u);
  // ... but it is not a checkpoint a run can continue from.
  EXPECT_NE(checkpoint_problem(dir).value_or("").find("optimizer.safetensors is missing"), std::string::npos);
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, RotationKeepsTheNewestCompleteOlderCheckpoint) {
  fs::path root = fresh_dir("rotate");
  save_checkpoint(root, adam_checkpoint(10));
  fs::path d20 = save_checkpoint(root, adam_checkpoint(20), 0);
  fs::remove(d20 / "state.json");  // step 20 is damaged: step 10 is the only complete older one
  save_checkpoint(root, adam_checkpoint(30), 2);
  EXPECT_TRUE(fs::exists(root / "step_00000010" / "state.json"));
  EXPECT_TRUE(fs::exists(root / "step_00000030" / "state.json"));
  fs::remove_all(root);
}

TEST(CheckpointIntegrity, RotationNeverDeletesANewerCheckpoint) {
  fs::path root = fresh_dir("newer");
  save_checkpoint(root, adam_checkpoint(20));
  save_checkpoint(root, adam_checkpoint(30));
  save_checkpoint(root, adam_checkpoint(10), 1);  // an older step written after them
  EXPECT_TRUE(fs::exists(root / "step_00000020"));
  EXPECT_TRUE(fs::exists(root / "step_00000030"));
  fs::remove_all(root);
}
