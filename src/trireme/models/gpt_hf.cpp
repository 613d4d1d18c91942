// Hugging Face config.json and checkpoint tensors <-> the GPT (see gpt_hf.h).
#include "trireme/models/gpt_hf.h"

#include <set>
#include <type_traits>

#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/view.h"

namespace trireme::models {

namespace {

using json = nlohmann::json;

constexpr const char* kGpt2 = "GPT2LMHeadModel";
constexpr const char* kLlama = "LlamaForCausalLM";
constexpr const char* kQwen2 = "Qwen2ForCausalLM";

template <class T>
T get(const json& j, const char* key) {
  TRIREME_CHECK(j.contains(key) && !j[key].is_null(), "config.json: no \"", key, "\"");
  // nlohmann converts a float to an integer type unchecked: 1e300 would be undefined behaviour.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    TRIREME_CHECK(j[key].is_number_integer(), "config.json: \"", key, "\" must be an integer, but is ", j[key].dump());
  }
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    TRIREME_FAIL("config.json: \"", key, "\" has the wrong type: ", j[key].dump());
  }
}

template <class T>
T get_or(const json& j, const char* key, T fallback) {
  return j.contains(key) && !j[key].is_null() ? get<T>(j, key) : fallback;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Rows of a q or k projection, per head: halves (i, i + hd/2) -> adjacent pairs (2i, 2i + 1),
// and back (Note [Hugging Face layouts]).
Tensor permute_head_rows(const Tensor& w, int64_t heads, bool to_pairs) {
  const int64_t rows = w.size(0), hd = rows / heads, rest = w.numel() / rows;
  const Shape from = to_pairs ? Shape{heads, 2, hd / 2, rest} : Shape{heads, hd / 2, 2, rest};
  return reshape(contiguous(transpose(reshape(w, from), 1, 2)), w.sizes());
}

std::string layer(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

}  // namespace

std::vector<std::string> hf_supported_architectures() { return {kGpt2, kLlama, kQwen2}; }

GPTConfig gpt_config_from_hf(const json& j) {
  TRIREME_CHECK(j.is_object(), "config.json: not a JSON object");
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1)
    arch = j["architectures"][0].is_string() ? j["architectures"][0].get<std::string>() : "";
  const auto supported = hf_supported_architectures();
  TRIREME_CHECK(std::find(supported.begin(), supported.end(), arch) != supported.end(), "config.json: architecture ",
                j.contains("architectures") ? j["architectures"].dump() : "(none given)",
                " is not supported (supported: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM)");
  GPTConfig c;
  c.dropout = 0.0;
  c.vocab_size = get<int64_t>(j, "vocab_size");
  if (arch == kGpt2) {
    c.arch = GPTArch::gpt2;
    c.d_model = get<int64_t>(j, "n_embd");
    c.n_layer = get<int64_t>(j, "n_layer");
    c.n_head = get<int64_t>(j, "n_head");
    c.block_size = get<int64_t>(j, "n_positions");
    c.ffn = get_or<int64_t>(j, "n_inner", 0);
    c.ln_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5);
    c.bias = true;
    c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", true);
    const std::string act = get_or<std::string>(j, "activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") {
      c.gelu = GeluApprox::tanh;
    } else if (act == "gelu") {
      c.gelu = GeluApprox::none;
    } else {
      TRIREME_FAIL("config.json: activation_function \"", act, "\" is not supported (gelu_new, gelu_pytorch_tanh or gelu)");
    }
    TRIREME_CHECK(get_or<bool>(j, "scale_attn_weights", true) && !get_or<bool>(j, "scale_attn_by_inverse_layer_idx", false),
                  "config.json: scale_attn_weights = false or scale_attn_by_inverse_layer_idx = true is not supported");
  } else {
    c.arch = GPTArch::llama;
    c.d_model = get<int64_t>(j, "hidden_size");
    c.n_layer = get<int64_t>(j, "num_hidden_layers");
    c.n_head = get<int64_t>(j, "num_attention_heads");
    c.n_kv_head = get_or<int64_t>(j, "num_key_value_heads", c.n_head);
    c.block_size = get<int64_t>(j, "max_position_embeddings");
    c.ffn = get<int64_t>(j, "intermediate_size");
    c.ln_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.bias = false;
    c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    c.qkv_bias = arch == kQwen2;
    const std::string act = get_or<std::string>(j, "hidden_act", "silu");
    TRIREME_CHECK(act == "silu", "config.json: hidden_act \"", act, "\" is not supported (silu)");
    // transformers 5 keeps the rotary settings in "rope_parameters", earlier versions beside the sizes.
    const json rope = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? j["rope_parameters"] : j;
    c.rope_theta = get_or<double>(rope, "rope_theta", 10000.0);
    const std::string rope_type = get_or<std::string>(rope, "rope_type", "default");
    TRIREME_CHECK(rope_type == "default" && (!j.contains("rope_scaling") || j["rope_scaling"].is_null()),
                  "config.json: rope scaling (rope_type \"", rope_type, "\", rope_scaling ",
                  j.contains("rope_scaling") ? j["rope_scaling"].dump() : "null", ") is not supported");
    TRIREME_CHECK(!get_or<bool>(j, "attention_bias", false) && !get_or<bool>(j, "mlp_bias", false),
                  "config.json: attention_bias / mlp_bias = true is not supported (Qwen2's q/k/v biases are)");
    TRIREME_CHECK(!get_or<bool>(j, "use_sliding_window", false), "config.json: use_sliding_window = true is not supported");
    TRIREME_CHECK(c.n_head > 0 && c.d_model % c.n_head == 0 &&
                      get_or<int64_t>(j, "head_dim", c.d_model / c.n_head) == c.d_model / c.n_head,
                  "config.json: head_dim ", j.contains("head_dim") ? j["head_dim"].dump() : "?",
                  " other than hidden_size / num_attention_heads is not supported");
  }
  c.validate();
  return c;
}

json gpt_config_to_hf(const GPTConfig& c) {
  json j;
  if (c.arch == GPTArch::gpt2) {
    j = {{"architectures", {kGpt2}}, {"model_type", "gpt2"}, {"vocab_size", c.vocab_size}, {"n_positions", c.block_size},
         {"n_embd", c.d_model}, {"n_layer", c.n_layer}, {"n_head", c.n_head},
         {"n_inner", c.ffn > 0 ? json(c.ffn) : json()}, {"layer_norm_epsilon", c.ln_eps},
         {"activation_function", c.gelu == GeluApprox::tanh ? "gelu_new" : "gelu"},
         {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
  } else {
    const bool qwen2 = c.qkv_bias;
    j = {{"architectures", {qwen2 ? kQwen2 : kLlama}}, {"model_type", qwen2 ? "qwen2" : "llama"},
         {"vocab_size", c.vocab_size}, {"hidden_size", c.d_model}, {"intermediate_size", c.ffn_size()},
         {"num_hidden_layers", c.n_layer}, {"num_attention_heads", c.n_head}, {"num_key_value_heads", c.kv_heads()},
         {"head_dim", c.d_model / c.n_head}, {"max_position_embeddings", c.block_size}, {"rms_norm_eps", c.ln_eps},
         {"rope_theta", c.rope_theta}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}}},
         {"hidden_act", "silu"}, {"attention_dropout", 0.0}};
    if (!qwen2) j.update({{"attention_bias", false}, {"mlp_bias", false}});
    else j["use_sliding_window"] = false;
  }
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["dtype"] = "float32";
  return j;
}

std::map<std::string, Shape> gpt_parameter_shapes(const GPTConfig& c) {
  const bool llama = c.arch == GPTArch::llama, b = c.bias && !llama;
  const int64_t d = c.d_model, V = c.vocab_size, f = c.ffn_size(), kv_d = c.kv_heads() * (d / c.n_head);
  std::map<std::string, Shape> s;
  s["transformer.wte.weight"] = {V, d};
  if (!llama) s["transformer.wpe.weight"] = {c.block_size, d};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = layer(i);
    for (const char* ln : {"ln_1.", "ln_2."}) {
      s[p + ln + "weight"] = {d};
      if (b) s[p + ln + "bias"] = {d};
    }
    if (llama) {
      s[p + "attn.q_proj.weight"] = {d, d};
      s[p + "attn.kv_proj.weight"] = {2 * kv_d, d};
      if (c.qkv_bias) s[p + "attn.q_proj.bias"] = {d}, s[p + "attn.kv_proj.bias"] = {2 * kv_d};
    } else {
      s[p + "attn.c_attn.weight"] = {3 * d, d};
      if (b) s[p + "attn.c_attn.bias"] = {3 * d};
    }
    s[p + "attn.c_proj.weight"] = {d, d};
    s[p + "mlp.c_fc.weight"] = {llama ? 2 * f : f, d};
    s[p + "mlp.c_proj.weight"] = {d, f};
    if (b) s[p + "attn.c_proj.bias"] = {d}, s[p + "mlp.c_fc.bias"] = {f}, s[p + "mlp.c_proj.bias"] = {d};
  }
  s["transformer.ln_f.weight"] = {d};
  if (b) s["transformer.ln_f.bias"] = {d};
  if (!c.tie_embeddings) s["lm_head.weight"] = {V, d};
  return s;
}

std::map<std::string, Tensor> gpt_weights_from_hf(const std::map<std::string, Tensor>& hf, const GPTConfig& c) {
  const std::map<std::string, Shape> shapes = gpt_parameter_shapes(c);
  std::set<std::string> used;
  auto take = [&](const std::string& name) -> Tensor {
    auto it = hf.find(name);
    TRIREME_CHECK(it != hf.end(), "the checkpoint has no tensor '", name, "', which the config (",
                  c.arch == GPTArch::gpt2 ? "gpt2" : "llama", ", ", c.n_layer, " layers) needs");
    used.insert(name);
    return it->second;
  };
  std::map<std::string, Tensor> out;
  auto put = [&](const std::string& ours, const Tensor& t, const std::string& from) {
    auto s = shapes.find(ours);
    TRIREME_CHECK(s != shapes.end(), "'", from, "' has no place in the model its config describes");
    TRIREME_CHECK(t.sizes() == s->second, "'", from, "' has shape ", t.sizes(), " but the config implies ",
                  s->second, " (as trireme stores it: ", ours, ")");
    out[ours] = contiguous(t);
  };
  if (c.arch == GPTArch::gpt2) {
    for (const auto& [name, t] : hf) {
      if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) {
        used.insert(name);
        continue;
      }
      std::string ours = name;
      if (ours != "lm_head.weight" && ours.rfind("transformer.", 0) != 0) ours = "transformer." + ours;
      if (ours == "lm_head.weight" && c.tie_embeddings) {  // GPT2LMHeadModel writes the tied head too
        used.insert(name);
        continue;
      }
      if (!shapes.contains(ours)) continue;  // reported below as unknown
      used.insert(name);
      const bool conv1d = gpt_hf_is_conv1d(ours);
      TRIREME_CHECK(!conv1d || t.dim() == 2, "'", name, "' must be 2-D, got shape ", t.sizes());
      put(ours, conv1d ? transpose(t, 0, 1) : t, name);
    }
  } else {
    const int64_t H = c.n_head, KV = c.kv_heads();
    put("transformer.wte.weight", take("model.embed_tokens.weight"), "model.embed_tokens.weight");
    put("transformer.ln_f.weight", take("model.norm.weight"), "model.norm.weight");
    if (!c.tie_embeddings) put("lm_head.weight", take("lm_head.weight"), "lm_head.weight");
    else if (hf.contains("lm_head.weight")) used.insert("lm_head.weight");  // a copy of the tied embedding
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".", o = layer(i);
      auto proj = [&](const std::string& which, int64_t heads, bool rotary, const char* part) {
        Tensor t = take(p + "self_attn." + which + "." + part);
        const int64_t rows = heads * (c.d_model / c.n_head);
        TRIREME_CHECK(t.size(0) == rows, "'", p, "self_attn.", which, ".", part, "' has shape ", t.sizes(),
                      ": expected ", rows, " rows (", heads, " heads of ", c.d_model / c.n_head, ")");
        return rotary ? permute_head_rows(t, heads, /*to_pairs=*/true) : t;
      };
      for (const char* part : c.qkv_bias ? std::vector<const char*>{"weight", "bias"} : std::vector<const char*>{"weight"}) {
        const std::string sfx = std::string(".") + part;
        put(o + "attn.q_proj" + sfx, proj("q_proj", H, true, part), p + "self_attn.q_proj" + sfx);
        put(o + "attn.kv_proj" + sfx, cat({proj("k_proj", KV, true, part), proj("v_proj", KV, false, part)}, 0),
            p + "self_attn.k_proj" + sfx + " | v_proj" + sfx);
      }
      put(o + "attn.c_proj.weight", take(p + "self_attn.o_proj.weight"), p + "self_attn.o_proj.weight");
      put(o + "ln_1.weight", take(p + "input_layernorm.weight"), p + "input_layernorm.weight");
      put(o + "ln_2.weight", take(p + "post_attention_layernorm.weight"), p + "post_attention_layernorm.weight");
      Tensor gate = take(p + "mlp.gate_proj.weight"), up = take(p + "mlp.up_proj.weight");
      TRIREME_CHECK(gate.sizes() == up.sizes(), "'", p, "mlp.gate_proj.weight' ", gate.sizes(), " and up_proj ",
                    up.sizes(), " differ in shape");
      put(o + "mlp.c_fc.weight", cat({gate, up}, 0), p + "mlp.gate_proj.weight | up_proj.weight");
      put(o + "mlp.c_proj.weight", take(p + "mlp.down_proj.weight"), p + "mlp.down_proj.weight");
    }
    for (const auto& [name, t] : hf)
      if (ends_with(name, ".rotary_emb.inv_freq")) used.insert(name);  // a buffer older files carry
  }
  std::vector<std::string> unknown;
  for (const auto& [name, t] : hf)
    if (!used.contains(name)) unknown.push_back(name);
  if (!unknown.empty()) {
    std::string list;
    for (size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", '" : "'") + unknown[i] + "'";
    TRIREME_FAIL("the checkpoint has ", unknown.size(), " tensor(s) the config's model has no place for: ", list,
                 unknown.size() > 5 ? ", ..." : "", " (more layers than num_hidden_layers, or another architecture?)");
  }
  for (const auto& [name, shape] : shapes)
    TRIREME_CHECK(out.contains(name), "the checkpoint has no tensor for '", name, "' (shape ", shape, ")");
  return out;
}

std::vector<std::pair<std::string, Tensor>> gpt_weights_to_hf(const std::map<std::string, Tensor>& ours,
                                                              const GPTConfig& c) {
  const std::map<std::string, Shape> shapes = gpt_parameter_shapes(c);
  for (const auto& [name, shape] : shapes) {
    auto it = ours.find(name);
    TRIREME_CHECK(it != ours.end(), "the checkpoint has no '", name, "', which its config's model has");
    TRIREME_CHECK(it->second.sizes() == shape, "'", name, "' has shape ", it->second.sizes(), " but its config implies ", shape);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  auto at = [&](const std::string& name) { return ours.at(name).detach(); };
  if (c.arch == GPTArch::gpt2) {
    // GPT2LMHeadModel has biases everywhere: a model without them gets zeros, the same function.
    const int64_t d = c.d_model, f = c.ffn_size();
    std::map<std::string, Shape> biases;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      const std::string p = layer(i);
      biases[p + "ln_1.bias"] = {d}, biases[p + "ln_2.bias"] = {d}, biases[p + "attn.c_attn.bias"] = {3 * d};
      biases[p + "attn.c_proj.bias"] = {d}, biases[p + "mlp.c_fc.bias"] = {f}, biases[p + "mlp.c_proj.bias"] = {d};
    }
    biases["transformer.ln_f.bias"] = {d};
    std::map<std::string, Tensor> all;
    for (const auto& [name, shape] : shapes) all[name] = gpt_hf_is_conv1d(name) ? contiguous(transpose(at(name), 0, 1)) : at(name);
    for (const auto& [name, shape] : biases)
      if (!all.contains(name)) all[name] = zeros(shape);
    if (c.tie_embeddings) all["lm_head.weight"] = at("transformer.wte.weight");
    for (auto& [name, t] : all) out.emplace_back(name, t);
    return out;
  }
  const int64_t H = c.n_head, KV = c.kv_heads(), kv_d = KV * (c.d_model / H);
  out.emplace_back("model.embed_tokens.weight", at("transformer.wte.weight"));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", o = layer(i);
    out.emplace_back(p + "input_layernorm.weight", at(o + "ln_1.weight"));
    for (const char* part : c.qkv_bias ? std::vector<const char*>{"weight", "bias"} : std::vector<const char*>{"weight"}) {
      const std::string sfx = std::string(".") + part;
      out.emplace_back(p + "self_attn.q_proj" + sfx, permute_head_rows(at(o + "attn.q_proj" + sfx), H, false));
      const std::vector<Tensor> kv = split(at(o + "attn.kv_proj" + sfx), kv_d, 0);
      out.emplace_back(p + "self_attn.k_proj" + sfx, permute_head_rows(kv[0], KV, false));
      out.emplace_back(p + "self_attn.v_proj" + sfx, contiguous(kv[1]));
    }
    out.emplace_back(p + "self_attn.o_proj.weight", at(o + "attn.c_proj.weight"));
    out.emplace_back(p + "post_attention_layernorm.weight", at(o + "ln_2.weight"));
    const std::vector<Tensor> gate_up = chunk(at(o + "mlp.c_fc.weight"), 2, 0);
    out.emplace_back(p + "mlp.gate_proj.weight", contiguous(gate_up[0]));
    out.emplace_back(p + "mlp.up_proj.weight", contiguous(gate_up[1]));
    out.emplace_back(p + "mlp.down_proj.weight", at(o + "mlp.c_proj.weight"));
  }
  out.emplace_back("model.norm.weight", at("transformer.ln_f.weight"));
  if (!c.tie_embeddings) out.emplace_back("lm_head.weight", at("lm_head.weight"));
  return out;
}

}  // namespace trireme::models
