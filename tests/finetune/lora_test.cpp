// LoRA in one process: an adapted layer computes W x + b + scale B A x; zero-initialised B leaves
// the model's logits as the base model's; merged weights give the adapted model's logits; only
// the adapters change in training, and a resumed run equals an uninterrupted one; adapters for
// another model and unknown target layers are refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "tiny_trainer_config.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/io/safetensors.h"
#include "trireme/models/gpt.h"
#include "trireme/models/lora.h"
#include "trireme/nn/init.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/view.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/lora_adapters.h"
#include "trireme/train/trainer.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  auto x = contiguous(to_dtype(a.detach(), DType::f64)).to_vector<double>();
  auto y = contiguous(to_dtype(b.detach(), DType::f64)).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

Tensor random_like(const Tensor& t, uint64_t seed) {
  Tensor r = zeros(t.sizes());
  nn::init_normal(r, 0.5, seed, "random");
  return r;
}

models::GPTConfig tiny(models::GPTArch arch) {
  models::GPTConfig c{.arch = arch, .vocab_size = 37, .block_size = 8, .n_layer = 2, .n_head = 4, .d_model = 16};
  if (arch == models::GPTArch::llama) c.bias = false, c.n_kv_head = 2, c.qkv_bias = true;
  return c;
}

Tensor ids_for_test() { return from_vector(std::vector<int64_t>{1, 5, 9, 2, 7, 3, 30, 11, 4, 4, 8, 0, 36, 12, 6, 1}, {2, 8}); }

// Every adapter's B set to random values, so that the adapters change the output.
void randomise_adapters(models::GPT& gpt) {
  NoGradGuard no_grad;
  uint64_t seed = 100;
  for (auto& [name, p] : gpt.named_parameters())
    if (models::is_lora_name(name)) nn::assign_in_place(p, random_like(p, seed++));
}

}  // namespace

TEST(Lora, ColumnAndRowLayersAddScaledBAx) {
  const parallel::LoraOptions o{.rank = 3, .alpha = 6, .seed = 5};  // scale 2
  parallel::ColumnParallelLinear col(5, 6, parallel::TpGroup::single());
  parallel::RowParallelLinear row(5, 6, parallel::TpGroup::single());
  col.add_lora(o);
  row.add_lora(o);
  Tensor x = random_like(zeros({4, 5}), 1);
  for (nn::Module* m : {static_cast<nn::Module*>(&col), static_cast<nn::Module*>(&row)}) {
    auto& lora = *dynamic_cast<parallel::LoraAdapter*>(m->child("lora").get());
    nn::assign_in_place(lora.B, random_like(lora.B, 2));
    const Tensor& W = m->parameter("weight");
    const Tensor& b = m->parameter("bias");
    const Tensor want = linear(x, W, b) + matmul(matmul(x, transpose(lora.A, 0, 1)), transpose(lora.B, 0, 1)) * 2.0;
    const Tensor got = m == &col ? col.forward(x) : row.forward(x);
    EXPECT_LT(max_abs_diff(got, want), 1e-5) << m->type_name();
    EXPECT_GT(max_abs_diff(got, linear(x, W, b)), 1e-2) << "the adapter must contribute";
  }
}

TEST(Lora, ZeroInitialisedBKeepsTheBaseLogitsAndFreezesTheBase) {
  for (auto arch : {models::GPTArch::gpt2, models::GPTArch::llama}) {
    models::GPT base(tiny(arch), 7), adapted(tiny(arch), 7);
    adapted.add_lora({.rank = 2, .alpha = 4, .seed = 3}, {"all"});
    const Tensor ids = ids_for_test();
    NoGradGuard no_grad;
    EXPECT_EQ(max_abs_diff(base.forward(ids), adapted.forward(ids)), 0.0);
    int adapters = 0;
    for (const auto& [name, p] : adapted.named_parameters()) {
      EXPECT_EQ(p.requires_grad(), models::is_lora_name(name)) << name;
      adapters += models::is_lora_name(name);
    }
    // Every block linear: gpt2 c_attn, c_proj, c_fc, c_proj; llama q_proj, kv_proj too.
    EXPECT_EQ(adapters, 2 * 2 * (arch == models::GPTArch::llama ? 5 : 4));
  }
}

TEST(Lora, MergedWeightsGiveTheAdaptedLogits) {
  for (auto arch : {models::GPTArch::gpt2, models::GPTArch::llama}) {
    models::GPT adapted(tiny(arch), 7), plain(tiny(arch), 0);
    const parallel::LoraOptions o{.rank = 2, .alpha = 3};
    adapted.add_lora(o, {"all"});
    randomise_adapters(adapted);
    const nn::NamedTensors state = adapted.full_state_dict();
    plain.load_full_state_dict(models::merge_lora({state.begin(), state.end()}, o.scale(), "test"));
    const Tensor ids = ids_for_test();
    NoGradGuard no_grad;
    const Tensor a = adapted.forward(ids), p = plain.forward(ids);
    EXPECT_LT(max_abs_diff(a, p), 1e-4);
    models::GPT base(tiny(arch), 7);
    EXPECT_GT(max_abs_diff(a, base.forward(ids)), 1e-2) << "the adapters must change the logits";
  }
}

TEST(Lora, AdapterForAnotherModelIsRefusedNamingTheTensor) {
  models::GPT adapted(tiny(models::GPTArch::gpt2), 7);
  adapted.add_lora({.rank = 2}, {"mlp.c_fc"});
  auto other_cfg = tiny(models::GPTArch::gpt2);
  other_cfg.d_model = 32;
  models::GPT other(other_cfg, 7);
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : other.full_state_dict()) state[n] = t;
  for (auto& [n, t] : models::lora_tensors(adapted.full_state_dict())) state[n] = t;
  try {
    models::merge_lora(state, 1.0, "adapters 'x.safetensors'");
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.h.0.mlp.c_fc.lora"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another base model"), std::string::npos) << e.what();
  }
  state.erase("transformer.h.0.mlp.c_fc.weight");
  EXPECT_THROW(models::merge_lora(state, 1.0, "x"), Error);
}

TEST(Lora, UnknownTargetLayerIsAConfigErrorWithAHint) {
  const auto cfg = [](const std::string& target) {
    return io::Config::parse("[lora]\nrank = 4\n", "t", {"lora.targets=" + target});
  };
  EXPECT_NO_THROW(cfg("mlp.c_fc"));
  try {
    cfg("v_proj");
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean \"attn.c_attn\""), std::string::npos) << e.what();
  }
  try {
    cfg("mlp.c_fx");
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean \"mlp.c_fc\""), std::string::npos) << e.what();
  }
  // Every layout takes adapters (lora_sp_zero3_layouts_test.cpp).
  EXPECT_NO_THROW(io::Config::parse("[lora]\nrank = 4\n[parallel]\ndp = 2\nzero = 3\n", "t"));
  EXPECT_NO_THROW(io::Config::parse("[lora]\nrank = 4\n[parallel]\ntp = 2\nsequence_parallel = true\n", "t"));
}

class LoraTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = trireme::testing::fresh_run_dir("lora_training");
    fs::create_directories(root_);
    base_ = root_ + "/base";
    train::Trainer(trireme::testing::tiny_trainer_config(base_, 10, 0.0), {.quiet = true}).run();
  }
  void TearDown() override { fs::remove_all(root_); }

  io::Config lora_config(const std::string& out, int64_t steps) {
    return trireme::testing::tiny_trainer_config(out, steps, 0.0,
                                        {"lora.rank=4", "lora.alpha=8", "lora.dropout=0.1", "optim.lr=0.01"});
  }
  static std::map<std::string, Tensor> model_of(const std::string& run) {
    std::map<std::string, Tensor> m;
    for (auto& [n, t] : train::load_checkpoint(*train::find_latest_checkpoint(run + "/checkpoints")).model) m[n] = t;
    return m;
  }

  std::string root_, base_;
};

TEST_F(LoraTraining, OnlyAdaptersChangeAndAdaptersAreSavedAlone) {
  const std::string out = root_ + "/lora";
  train::Trainer(lora_config(out, 6), {.quiet = true, .init_from = base_}).run();
  const auto before = model_of(base_), after = model_of(out);
  int adapters = 0;
  for (const auto& [name, t] : after) {
    if (models::is_lora_name(name)) {
      ++adapters;
      continue;
    }
    ASSERT_TRUE(before.count(name)) << name;
    EXPECT_EQ(max_abs_diff(t, before.at(name)), 0.0) << name << " is frozen";
  }
  EXPECT_EQ(adapters, 2 * 4 * 2);
  // B started at zero; after training it is not.
  EXPECT_GT(max_abs_diff(after.at("transformer.h.1.mlp.c_proj.lora.B"), zeros({32, 4})), 0.0);
  const auto dir = *train::find_latest_checkpoint(out + "/checkpoints");
  const train::AdapterFile file = train::load_adapters(dir / "adapters.safetensors");
  EXPECT_EQ(file.tensors.size(), size_t(adapters));
  EXPECT_DOUBLE_EQ(file.scale, 2.0);
  for (const auto& [name, t] : file.tensors) EXPECT_EQ(max_abs_diff(t, after.at(name)), 0.0) << name;
  // The optimizer holds state for the adapters alone.
  for (const auto& [name, t] : train::load_checkpoint(dir).optimizer) {
    if (name.rfind("state.", 0) != 0) continue;
    EXPECT_NE(name.find(".lora."), std::string::npos) << name;
  }
}

TEST_F(LoraTraining, ResumeEqualsUninterrupted) {
  const std::string whole = root_ + "/whole", parts = root_ + "/parts";
  auto s_whole = train::Trainer(lora_config(whole, 12), {.quiet = true, .init_from = base_}).run();
  train::Trainer(lora_config(parts, 12), {.quiet = true, .stop_after = 5, .init_from = base_}).run();
  auto s_rest = train::Trainer(lora_config(parts, 12), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(s_rest.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(s_rest.losses[i], s_whole.losses[i + 5]) << "step " << i + 6;
  const auto a = model_of(whole), b = model_of(parts);
  for (const auto& [name, t] : a) EXPECT_EQ(max_abs_diff(t, b.at(name)), 0.0) << name;
}
