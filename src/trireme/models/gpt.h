// GPT: the GPT-2 architecture (learned token and position embeddings, pre-LN decoder blocks,
// a final LayerNorm, a language-model head tied to the token embedding or separate).
//
// Parameter names follow Hugging Face's GPT2LMHeadModel, so checkpoints map one to one:
//   transformer.wte.weight              (V, d)
//   transformer.wpe.weight              (block_size, d)
//   transformer.h.<i>.ln_1.{weight,bias}
//   transformer.h.<i>.attn.c_attn.{weight,bias}   weight (3d, d), rows q | k | v
//   transformer.h.<i>.attn.c_proj.{weight,bias}   weight (d, d)
//   transformer.h.<i>.ln_2.{weight,bias}
//   transformer.h.<i>.mlp.c_fc.{weight,bias}      weight (4d, d)
//   transformer.h.<i>.mlp.c_proj.{weight,bias}    weight (d, 4d)
//   transformer.ln_f.{weight,bias}
//   lm_head.weight                      (V, d), only when the head is not tied
//
//   models::GPTConfig cfg{.vocab_size = 50257, .block_size = 1024, .n_layer = 12, .n_head = 12, .d_model = 768};
//   models::GPT gpt(cfg, /*seed=*/1337);
//   Tensor logits = gpt.forward(ids);            // ids (B, T) i64 -> (B, T, V)
//   Tensor loss = gpt.loss(ids, targets);        // scalar mean cross-entropy
#pragma once

#include <map>
#include <memory>
#include <string>

#include "trireme/nn/decoder_layer.h"
#include "trireme/nn/dropout.h"
#include "trireme/nn/embedding.h"
#include "trireme/nn/layer_list.h"
#include "trireme/nn/layer_norm.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/elementwise.h"

namespace trireme::models {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t d_model = 768;
  double dropout = 0.0;
  bool bias = true;            // biases in Linear layers and LayerNorms
  bool tie_embeddings = true;  // lm_head shares transformer.wte.weight
  double ln_eps = 1e-5;
  GeluApprox gelu = GeluApprox::tanh;

  // Throws trireme::Error naming the first bad field and its value.
  void validate() const;
  // The closed-form count of parameter elements (tied weights counted once).
  int64_t num_parameters() const;
};

// The container of the body, so names read "transformer.h.0...." as in Hugging Face.
class GPTTransformer : public nn::Module {
 public:
  explicit GPTTransformer(const GPTConfig& config);
  std::shared_ptr<nn::Embedding> wte;
  std::shared_ptr<nn::Embedding> wpe;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::LayerList> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
};

// The positions 0 .. T-1 (i64) on a device, made on first use and kept while T and the device
// stay the same: arange on the host copied to a GPU in every forward would synchronise the host
// with the GPU at the start of every step, so it could never queue a step ahead.
class PositionCache {
 public:
  const Tensor& get(int64_t T, Device device);
  // The positions of token rows [first, first + count) of a batch of length-T sequences laid out
  // one after another ((first + i) mod T): a sequence-parallel rank's rows.
  const Tensor& rows(int64_t first, int64_t count, int64_t T, Device device);

 private:
  Tensor positions_;
  Tensor rows_;
  int64_t rows_first_ = -1, rows_T_ = -1;
};

class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& config, uint64_t seed = 0);

  // ids (B, T) integer, T <= block_size -> logits (B, T, V).
  Tensor forward(const Tensor& ids);
  // Mean cross-entropy of forward(ids) against targets (B, T); targets == -100 are ignored.
  Tensor loss(const Tensor& ids, const Tensor& targets);

  // GPT-2 initialisation, layout-independent (nn/init.h): weights N(0, 0.02), residual
  // projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LN weights 1.
  void init_weights(uint64_t seed);
  // nn::init_parameters(gpt, seed) runs the layers' defaults first and this last: GPT-2's scheme.
  void reset_parameters(uint64_t seed) override { init_weights(seed); }

  const GPTConfig& config() const { return config_; }
  // The head's weight: transformer.wte.weight when tied.
  const Tensor& lm_head_weight() const;

  std::shared_ptr<GPTTransformer> transformer;
  std::shared_ptr<nn::Linear> lm_head;  // null when tied

 private:
  GPTConfig config_;
  PositionCache positions_;
};

// Note [Hugging Face GPT-2 checkpoints]
// Hugging Face stores c_attn, c_proj and c_fc as Conv1D, whose weight is (in, out): the
// transpose of trireme's Linear (out, in). GPT2Model checkpoints (e.g. the hub's "gpt2") omit
// the "transformer." prefix and lm_head; GPT2LMHeadModel ones have both. Older files carry the
// causal-mask buffers "attn.bias" / "attn.masked_bias", which are not parameters.

// True for the names whose Hugging Face tensors are Conv1D weights, stored transposed.
bool gpt_hf_is_conv1d(const std::string& name);
// Converts a Hugging Face GPT-2 state dict (either naming) to trireme's names and layouts: adds
// the "transformer." prefix where missing, transposes Conv1D weights, drops the mask buffers,
// and drops lm_head.weight when `tie_embeddings` (it is wte).
std::map<std::string, Tensor> gpt_state_dict_from_hf(const std::map<std::string, Tensor>& hf,
                                                     bool tie_embeddings = true);
// The reverse, in GPT2LMHeadModel naming; with a tied head, lm_head.weight is written as a copy
// of wte so that GPT2LMHeadModel.from_pretrained finds it.
std::map<std::string, Tensor> gpt_state_dict_to_hf(const nn::NamedTensors& ours, bool tie_embeddings = true);

}  // namespace trireme::models
