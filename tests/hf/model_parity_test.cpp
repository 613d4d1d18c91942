// trireme's GPT against transformers: GPT2LMHeadModel, LlamaForCausalLM (GQA, untied, sharded
// file) and Qwen2ForCausalLM (GQA, q/k/v biases, tied, padded vocabulary) with random weights,
// made by tests/fixtures/hf/make_fixtures.py. Logits within 1e-4 relative in float32 and the same
// greedy tokens, read straight from the folder and through `import` -> checkpoint -> load.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "hf_fixtures.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/io/safetensors.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"
#include "trireme/train/hf_checkpoint.h"
#include "trireme/train/trained_model.h"

namespace trireme {
namespace {

namespace fs = std::filesystem;
using test::hf_fixture;

// max |got - want| / max |want| over all logits.
double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = contiguous(got).to_vector<float>(), w = contiguous(want).to_vector<float>();
  EXPECT_EQ(g.size(), w.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    diff = std::max(diff, double(std::abs(g[i] - w[i])));
    scale = std::max(scale, double(std::abs(w[i])));
  }
  return diff / scale;
}

std::vector<int64_t> greedy(models::GPT& model, std::vector<int64_t> ids, int n) {
  NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    Tensor logits = model.forward(from_vector(ids, {1, int64_t(ids.size())}));
    std::vector<float> last = contiguous(narrow(logits, 1, int64_t(ids.size()) - 1, 1)).to_vector<float>();
    const int64_t next = std::max_element(last.begin(), last.end()) - last.begin();
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

void check_model(models::GPT& model, const std::string& kind) {
  NoGradGuard no_grad;
  model.eval();
  const io::SafetensorsFile expected = io::load_safetensors(hf_fixture(kind + "/expected.safetensors"));
  for (int i = 0; i < 2; ++i) {
    const Tensor ids = expected.tensors.at("input_ids." + std::to_string(i));
    const double err = relative_error(model.forward(ids), expected.tensors.at("logits." + std::to_string(i)));
    EXPECT_LT(err, 1e-4) << kind << " sequence " << i;
  }
  for (const auto& g : test::read_json(hf_fixture(kind + "/expected.json"))["greedy"]) {
    EXPECT_EQ(greedy(model, g["prompt"].get<std::vector<int64_t>>(), int(g["new_tokens"].size())),
              g["new_tokens"].get<std::vector<int64_t>>())
        << kind;
  }
}

class HfModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfModelParity, LogitsAndGreedyTokensMatchTransformers) {
  const train::HfModel m = train::read_hf_model(hf_fixture(GetParam()));
  models::GPT model(m.config, 0);
  model.load_full_state_dict(m.weights);
  check_model(model, GetParam());
}

TEST_P(HfModelParity, ImportedCheckpointLoadsForGenerate) {
  const fs::path out = fs::temp_directory_path() / ("trireme_hf_import_" + GetParam() + std::to_string(::getpid()));
  fs::remove_all(out);
  train::import_hf(hf_fixture(GetParam()), out);
  train::TrainedModel m = train::load_trained_model(out.string(), Device::cpu(), "test");
  EXPECT_EQ(m.tokenizer->type(), "hf");
  check_model(*m.model, GetParam());
  fs::remove_all(out);
}

TEST_P(HfModelParity, ExportThenImportGivesTheSameTensors) {
  const fs::path base = fs::temp_directory_path() / ("trireme_hf_roundtrip_" + GetParam() + std::to_string(::getpid()));
  fs::remove_all(base);
  train::import_hf(hf_fixture(GetParam()), base / "ckpt");
  train::export_hf((base / "ckpt").string(), base / "exported");
  EXPECT_TRUE(fs::exists(base / "exported" / "tokenizer.json"));
  const train::HfModel a = train::read_hf_model(hf_fixture(GetParam()));
  const train::HfModel b = train::read_hf_model(base / "exported");
  EXPECT_EQ(b.architecture, a.architecture);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (const auto& [name, t] : a.weights) {
    ASSERT_TRUE(b.weights.contains(name)) << name;
    EXPECT_EQ(contiguous(t).to_vector<float>(), contiguous(b.weights.at(name)).to_vector<float>()) << name;
  }
  // The exported tensors are transformers' own: byte for byte the fixture's where it stores them.
  if (GetParam() == "qwen2") {
    const io::SafetensorsFile orig = io::load_safetensors(hf_fixture("qwen2/model.safetensors"));
    const io::SafetensorsFile back = io::load_safetensors((base / "exported" / "model.safetensors").string());
    ASSERT_EQ(orig.tensors.size(), back.tensors.size());
    for (const auto& [name, t] : orig.tensors)
      EXPECT_EQ(t.to_vector<float>(), back.tensors.at(name).to_vector<float>()) << name;
  }
  fs::remove_all(base);
}

TEST_P(HfModelParity, HuggingFaceFolderLoadsInPlaceForGenerate) {
  train::TrainedModel m = train::load_trained_model(hf_fixture(GetParam()), Device::cpu(), "test");
  EXPECT_EQ(m.tokenizer->type(), "hf");
  check_model(*m.model, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, HfModelParity, ::testing::Values("gpt2", "llama", "qwen2"));

}  // namespace
}  // namespace trireme
