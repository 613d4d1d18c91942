// Perplexity of a trained model on a text: the mean cross-entropy of predicting each token from
// the ones before it, in nats and bits, per token and per character (so that models with
// different tokenizers compare).
//
//   TrainedModel m = load_trained_model("out", Device::cpu(), "eval");
//   TextScore s = score_text(*m.model, *m.tokenizer, read_file("poems.txt"), {.stride = 32});
//   s.bits_per_char
//
// Windows: the text's tokens are cut into windows of block_size + 1 (inputs and their next
// tokens) starting every `stride` tokens. stride = block_size (the default) gives
// non-overlapping windows, each token predicted once, the context restarting at each window.
// A smaller stride gives every predicted token at least block_size - stride tokens of context;
// each token is still scored once, by the first window that predicts it. The first token of the
// text is only context.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trireme/core/error.h"
#include "trireme/io/tokenizer.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

// Text that cannot be scored (empty, or fewer than 2 tokens): bad input, not a failure.
class EvalInputError : public Error {
 public:
  using Error::Error;
};

struct ScoreOptions {
  int64_t stride = 0;       // 0: block_size (non-overlapping windows)
  int64_t batch_size = 8;   // windows per forward pass
};

struct TextScore {
  int64_t tokens = 0;               // tokens in the text
  int64_t scored_tokens = 0;        // tokens predicted (all but the first)
  int64_t scored_characters = 0;    // characters (code points) of the predicted tokens' text
  int64_t windows = 0;
  int64_t stride = 0;
  int64_t unknown_tokens = 0;       // <unk> tokens (characters a character tokenizer lacks)
  double nats_per_token = 0, bits_per_token = 0, perplexity = 0;
  double nats_per_char = 0, bits_per_char = 0;
};

// `what` names the text in errors (its file name). The model is run without gradients, in eval
// mode, on the device its parameters are on.
TextScore score_text(models::GPT& model, const io::Tokenizer& tokenizer, std::string_view text, ScoreOptions options = {},
                     const std::string& what = "the text");

}  // namespace trireme::train
