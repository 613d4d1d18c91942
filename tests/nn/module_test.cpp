// Module: registration order, dotted names, state-dict round trip and load errors, modes,
// conversions, zero_grad, and the GPT parameter count against its closed form.
#include <gtest/gtest.h>

#include <cmath>

#include "trireme/io/safetensors.h"
#include "trireme/models/gpt.h"
#include "trireme/nn/decoder_layer.h"
#include "trireme/nn/layer_list.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"

using namespace trireme;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

// A small tree: own parameter, a buffer, and two children.
class Toy : public nn::Module {
 public:
  Toy() : Module("Toy") {
    scale = register_parameter("scale", ones({3}));
    count = register_buffer("count", zeros({1}, DType::i64));
    a = register_module("a", std::make_shared<nn::Linear>(3, 4));
    b = register_module("b", std::make_shared<nn::Linear>(4, 2, /*bias=*/false));
  }
  Tensor scale, count;
  std::shared_ptr<nn::Linear> a, b;
};

}  // namespace

TEST(Module, NamedParametersAreOrderedAndDotted) {
  Toy toy;
  EXPECT_EQ(names(toy.named_parameters()), (std::vector<std::string>{"scale", "a.weight", "a.bias", "b.weight"}));
  EXPECT_EQ(names(toy.named_parameters("m")),
            (std::vector<std::string>{"m.scale", "m.a.weight", "m.a.bias", "m.b.weight"}));
  EXPECT_EQ(names(toy.named_buffers()), (std::vector<std::string>{"count"}));
  EXPECT_EQ(names(toy.state_dict()), (std::vector<std::string>{"scale", "a.weight", "a.bias", "b.weight", "count"}));
  EXPECT_EQ(toy.num_parameters(), 3 + 12 + 4 + 8);
  EXPECT_EQ(toy.a->qualified_name(), "a");
  EXPECT_TRUE(toy.parameters()[1].same(toy.a->weight));
  for (auto& p : toy.parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
}

TEST(Module, DecoderLayerNamesFollowGPT2) {
  nn::LayerList h;
  h.push_back(std::make_shared<nn::TransformerDecoderLayer>(nn::DecoderLayerOptions{.d_model = 8, .n_head = 2}));
  EXPECT_EQ(names(h.named_parameters("h")),
            (std::vector<std::string>{"h.0.ln_1.weight", "h.0.ln_1.bias", "h.0.attn.c_attn.weight",
                                      "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias",
                                      "h.0.ln_2.weight", "h.0.ln_2.bias", "h.0.mlp.c_fc.weight",
                                      "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias"}));
  EXPECT_EQ(h[0]->child("attn")->qualified_name(), "0.attn");
}

TEST(Module, RegistrationRejectsDuplicatesAndDots) {
  Toy toy;
  EXPECT_NE(error_of([&] { toy.register_parameter("scale", ones({1})); }).find("already taken"), std::string::npos);
  EXPECT_NE(error_of([&] { toy.register_buffer("x.y", ones({1})); }).find("no '.'"), std::string::npos);
  auto lin = std::make_shared<nn::Linear>(2, 2);
  toy.register_module("c", lin);
  EXPECT_NE(error_of([&] { toy.register_module("d", lin); }).find("already registered under 'c'"), std::string::npos);
}

TEST(Module, StateDictRoundTripThroughSafetensors) {
  Toy src, dst;
  init_parameters(src, 7);
  init_parameters(dst, 8);
  EXPECT_NE(src.a->weight.to_vector<float>(), dst.a->weight.to_vector<float>());
  auto file = io::parse_safetensors(io::serialize_safetensors(src.state_dict()));
  Tensor handle = dst.a->weight;  // a handle taken before loading sees the new values
  dst.load_state_dict(file.tensors);
  auto got = dst.state_dict();
  auto want = src.state_dict();
  ASSERT_EQ(names(got), names(want));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].second.to_vector<double>(), want[i].second.to_vector<double>()) << got[i].first;
  }
  EXPECT_EQ(handle.to_vector<float>(), src.a->weight.to_vector<float>());
  EXPECT_TRUE(handle.requires_grad() && handle.is_leaf());
}

TEST(Module, LoadStateDictNamesEveryProblem) {
  Toy toy;
  std::map<std::string, Tensor> state;
  for (auto& [n, t] : toy.state_dict()) state[n] = t.detach();
  state.erase("a.bias");
  state["extra.weight"] = ones({2});
  state["b.weight"] = ones({3, 3});
  state["scale"] = ones({3}, DType::f64);
  std::string msg = error_of([&] { toy.load_state_dict(state); });
  EXPECT_NE(msg.find("missing keys: a.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected keys: extra.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("b.weight: shape [3, 3] in the state, [2, 4] in the model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scale: dtype f64 in the state, f32 in the model"), std::string::npos) << msg;

  // Non-strict ignores missing/unexpected keys, never mismatches; convert_dtype allows f64 -> f32.
  state["b.weight"] = full({2, 4}, 0.5);
  toy.load_state_dict(state, /*strict=*/false, /*convert_dtype=*/true);
  EXPECT_EQ(toy.b->weight.at({1, 3}), 0.5);
  EXPECT_EQ(toy.scale.dtype(), DType::f32);
}

TEST(Module, TrainEvalIsRecursive) {
  Toy toy;
  EXPECT_TRUE(toy.is_training() && toy.a->is_training());
  toy.eval();
  EXPECT_FALSE(toy.is_training() || toy.a->is_training() || toy.b->is_training());
  toy.train();
  EXPECT_TRUE(toy.b->is_training());
}

TEST(Module, ApplyVisitsChildrenThenSelf) {
  Toy toy;
  std::vector<std::string> seen;
  toy.apply([&](nn::Module& m) { seen.push_back(m.type_name() + ":" + m.qualified_name()); });
  EXPECT_EQ(seen, (std::vector<std::string>{"Linear:a", "Linear:b", "Toy:"}));
}

TEST(Module, ZeroGradAndDtypeConversionKeepLeaves) {
  Toy toy;
  Tensor handle = toy.a->weight;
  sum(toy.a->forward(ones({2, 3}))).backward();
  ASSERT_TRUE(handle.grad().defined());
  toy.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(sum(handle.grad()).item(), 0.0);
  toy.zero_grad();
  EXPECT_FALSE(handle.grad().defined());

  std::vector<float> before = handle.to_vector<float>();
  sum(toy.a->forward(ones({2, 3}))).backward();
  toy.to(DType::f64);
  EXPECT_EQ(handle.dtype(), DType::f64);  // the same TensorImpl, converted in place
  EXPECT_TRUE(handle.is_leaf() && handle.requires_grad());
  EXPECT_EQ(handle.grad().dtype(), DType::f64);
  EXPECT_EQ(toy.count.dtype(), DType::i64);  // integer buffers are left alone
  std::vector<double> after = handle.to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], double(before[i]));
  Tensor y = toy.a->forward(ones({2, 3}, DType::f64));
  EXPECT_EQ(y.dtype(), DType::f64);
  toy.to(Device::cpu());  // a no-op on the same device
  EXPECT_EQ(handle.dtype(), DType::f64);
}

TEST(Module, GPTParameterCountMatchesClosedForm) {
  for (bool tie : {true, false}) {
    for (bool bias : {true, false}) {
      models::GPTConfig c{.vocab_size = 50, .block_size = 12, .n_layer = 3, .n_head = 2, .d_model = 16,
                          .bias = bias, .tie_embeddings = tie};
      models::GPT gpt(c);
      EXPECT_EQ(gpt.num_parameters(), c.num_parameters()) << "tie=" << tie << " bias=" << bias;
    }
  }
  // GPT-2 small: 124,439,808 parameters with the tied head.
  models::GPTConfig small{.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
  EXPECT_EQ(small.num_parameters(), 124439808);
}

TEST(Module, GPTNamesAndConfigValidation) {
  models::GPTConfig c{.vocab_size = 20, .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 8};
  models::GPT gpt(c);
  auto n = names(gpt.named_parameters());
  EXPECT_EQ(n.front(), "transformer.wte.weight");
  EXPECT_EQ(n[1], "transformer.wpe.weight");
  EXPECT_EQ(n[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(n[4], "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(n.back(), "transformer.ln_f.bias");
  c.tie_embeddings = false;
  EXPECT_EQ(names(models::GPT(c).named_parameters()).back(), "lm_head.weight");

  auto bad = [&](auto edit) {
    models::GPTConfig b = c;
    edit(b);
    return error_of([&] { b.validate(); });
  };
  EXPECT_NE(bad([](auto& b) { b.n_head = 3; }).find("d_model (8) must be divisible by n_head (3)"), std::string::npos);
  EXPECT_NE(bad([](auto& b) { b.vocab_size = 0; }).find("vocab_size"), std::string::npos);
  EXPECT_NE(bad([](auto& b) { b.dropout = 1.0; }).find("dropout"), std::string::npos);
  EXPECT_NE(bad([](auto& b) { b.ln_eps = 0; }).find("ln_eps"), std::string::npos);
}

TEST(Module, GPTInitFollowsGPT2Scales) {
  models::GPTConfig c{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .d_model = 32};
  models::GPT gpt(c, 3);
  auto std_of = [](const Tensor& t) { return std::sqrt(var(t).item()); };
  EXPECT_NEAR(std_of(gpt.transformer->wte->weight), 0.02, 0.002);
  auto layer = gpt.blocks()[1];
  EXPECT_NEAR(std_of(layer->mlp->c_proj->weight), 0.02 / std::sqrt(4.0), 0.001);
  EXPECT_EQ(sum(abs(layer->attn->c_attn->bias)).item(), 0.0);
  EXPECT_EQ(mean(layer->ln_2->weight).item(), 1.0);
  // Same seed, same weights; another seed, others.
  models::GPT again(c, 3), other(c, 4);
  EXPECT_EQ(again.transformer->wte->weight.to_vector<float>(), gpt.transformer->wte->weight.to_vector<float>());
  EXPECT_NE(other.transformer->wte->weight.to_vector<float>(), gpt.transformer->wte->weight.to_vector<float>());
}

TEST(Module, HFMappingTransposesConv1DAndRoundTrips) {
  models::GPTConfig c{.vocab_size = 20, .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 8};
  models::GPT gpt(c, 1);
  auto hf = models::gpt_state_dict_to_hf(gpt.state_dict());
  EXPECT_EQ(hf.at("transformer.h.0.attn.c_attn.weight").sizes(), (Shape{8, 24}));  // Conv1D: (in, out)
  EXPECT_EQ(hf.at("transformer.h.0.mlp.c_fc.weight").sizes(), (Shape{8, 32}));
  EXPECT_TRUE(hf.count("lm_head.weight"));
  // GPT2Model naming (no prefix) with the mask buffers, as the hub's "gpt2" file has it.
  std::map<std::string, Tensor> bare;
  for (auto& [name, t] : hf) {
    if (name != "lm_head.weight") bare[name.substr(std::string("transformer.").size())] = t;
  }
  bare["h.0.attn.bias"] = ones({1, 1, 8, 8});
  models::GPT loaded(c, 2);
  loaded.load_state_dict(models::gpt_state_dict_from_hf(bare));
  for (auto& [name, t] : gpt.named_parameters()) {
    Tensor other;
    for (auto& [n2, t2] : loaded.named_parameters()) {
      if (n2 == name) other = t2;
    }
    EXPECT_EQ(t.to_vector<float>(), other.to_vector<float>()) << name;
  }
}

TEST(Module, TiedTensorsAppearOnceAndInitParametersOnGPTIsGPT2Init) {
  auto holder = std::make_shared<nn::LayerList>();
  auto l0 = holder->push_back(std::make_shared<nn::Linear>(4, 4, false));
  auto l1 = holder->push_back(std::make_shared<nn::Linear>(4, 4, false));
  l1->register_parameter("tied", l0->weight, true);
  EXPECT_EQ(names(holder->named_parameters()), (std::vector<std::string>{"0.weight", "1.weight"}));
  EXPECT_EQ(holder->num_parameters(), 32);

  models::GPTConfig c{.vocab_size = 20, .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 8};
  models::GPT gpt(c, 6), other(c, 0);
  nn::init_parameters(other, 6);
  for (size_t i = 0; i < gpt.parameters().size(); ++i) {
    EXPECT_EQ(gpt.parameters()[i].to_vector<float>(), other.parameters()[i].to_vector<float>());
  }
}
