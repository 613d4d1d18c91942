// The GPT as Hugging Face transformers writes it: config.json <-> GPTConfig, and checkpoint
// tensors <-> the GPT's parameter names and layouts, for GPT2LMHeadModel (arch gpt2) and
// LlamaForCausalLM / Qwen2ForCausalLM (arch llama).
//
// Note [Hugging Face layouts]
//   GPT-2   names as trireme's (transformer.h.<i>...), "transformer." optional (GPT2Model
//           files); c_attn, c_proj and c_fc are Conv1D, (in, out): transposed on the way in
//           and out; attn.bias / attn.masked_bias are mask buffers, skipped.
//   Llama   model.embed_tokens -> transformer.wte, model.layers.<i> -> transformer.h.<i>,
//           input_layernorm -> ln_1, post_attention_layernorm -> ln_2, model.norm -> ln_f,
//           q_proj -> attn.q_proj, k_proj | v_proj -> attn.kv_proj (rows joined),
//           o_proj -> attn.c_proj, gate_proj | up_proj -> mlp.c_fc, down_proj -> mlp.c_proj.
//           transformers rotates the halves of each head (rotate_half: dims i and i + hd/2 pair),
//           trireme's rotary_embedding adjacent pairs (2i, 2i + 1) at the same angles; q_proj's
//           and k_proj's rows (and biases) are permuted per head between the two, which leaves
//           q·k, and so the model, unchanged.
// A tied head is written as lm_head.weight for GPT-2 (GPT2LMHeadModel expects it) and left out
// for Llama/Qwen2 (as transformers saves them). Every error names the key and what was expected.
//
//   GPTConfig c = gpt_config_from_hf(config_json);
//   std::map<std::string, Tensor> ours = gpt_weights_from_hf(hf_tensors, c);
//   auto hf = gpt_weights_to_hf(ours, c);  // and back
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "trireme/models/gpt.h"

namespace trireme::models {

// The architectures read and written ("GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM").
std::vector<std::string> hf_supported_architectures();
// The config of a config.json; what it cannot represent (another architecture, rope scaling,
// sliding windows, an unknown activation, ...) is an Error naming the key and value.
GPTConfig gpt_config_from_hf(const nlohmann::json& config);
// config.json for `c`: GPT2LMHeadModel for gpt2, Qwen2ForCausalLM for llama with qkv_bias,
// LlamaForCausalLM otherwise.
nlohmann::json gpt_config_to_hf(const GPTConfig& c);

// Hugging Face tensors (float32) -> trireme's names and layouts. Every tensor must be known and
// of the shape `c` implies, every parameter present (Error naming them otherwise).
std::map<std::string, Tensor> gpt_weights_from_hf(const std::map<std::string, Tensor>& hf, const GPTConfig& c);
// The reverse, in the names transformers saves.
std::vector<std::pair<std::string, Tensor>> gpt_weights_to_hf(const std::map<std::string, Tensor>& ours,
                                                              const GPTConfig& c);

// Each parameter's single-process shape under `c`, by trireme name.
std::map<std::string, Shape> gpt_parameter_shapes(const GPTConfig& c);

}  // namespace trireme::models
