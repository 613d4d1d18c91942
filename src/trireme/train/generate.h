// Sampling text from a trained GPT: temperature, top-k, top-p (nucleus), a seed, several samples,
// and text streamed as produced.
//
//   auto g = load_generator("out/checkpoints");           // model + tokenizer from a checkpoint
//   auto g = load_generator("out", Device::cuda(0));      // ... run on a GPU
//   g.generate("床前明月光", {.max_new_tokens = 64, .top_k = 20}, [](std::string_view piece) { ... });
//   g.set_mode(GenerateMode::static_graph);               // replay traced forwards (below)
//
// The prompt must be valid UTF-8 and, with a character-level tokenizer, use only characters the
// tokenizer knows (prompt_problem says what is wrong): an unknown character would silently
// become <unk>, a token the model never saw in training, and the continuation would be
// conditioned on noise. An empty prompt starts from a newline (start_token), as a text does
// after a line break.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "trireme/graph/static_function.h"
#include "trireme/io/tokenizer.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no limit
  double top_p = 1.0;        // keep the most likely tokens up to this total probability; 1 = all
  uint64_t seed = 0;
  uint64_t sample = 0;       // which sample of (seed): each draws its own random numbers
};

// eager: each token runs the model's forward op by op. static_graph: the forward is traced once
// per context length bucket (powers of two from 16 up to block_size: the context is padded at
// its end, which a causal model's earlier positions never see) and replayed (docs/STATIC_GRAPH.md):
// on a GPU the host then does little more than launch the kernels of each token.
enum class GenerateMode { eager, static_graph };

class TextGenerator {
 public:
  TextGenerator(std::unique_ptr<models::GPT> model, std::unique_ptr<io::Tokenizer> tokenizer);
  // Calls on_text with each new piece of complete UTF-8 text; returns the whole continuation.
  std::string generate(const std::string& prompt, const SamplingOptions& options,
                       const std::function<void(std::string_view)>& on_text = {});
  const models::GPT& model() const { return *model_; }
  const io::Tokenizer& tokenizer() const { return *tokenizer_; }

  void set_mode(GenerateMode mode) { mode_ = mode; }
  // The logits (V, f32, on the host) of the token after the last block_size tokens of `ids`.
  std::vector<float> next_token_logits(const std::vector<int32_t>& ids);
  // static_graph: the forwards traced so far (one per context length bucket met).
  int64_t graphs_traced() const { return static_forward_ ? static_forward_->traces() : 0; }

 private:
  std::unique_ptr<models::GPT> model_;
  std::unique_ptr<io::Tokenizer> tokenizer_;
  GenerateMode mode_ = GenerateMode::eager;
  std::unique_ptr<graph::StaticFunction> static_forward_;
};

// The length a static forward runs for a context of `length` tokens: the next power of two from
// 16, at most block_size.
int64_t static_context_bucket(int64_t length, int64_t block_size);

// Loads the model, its config and the tokenizer saved in a checkpoint (a checkpoint folder, or a
// run's out_dir / checkpoints folder, whose latest checkpoint is used), the model on `device`
// (a GPU must be usable: the error says why not). Reads state.json and model.safetensors only
// (trained_model.h); the config is validated, and with memory_check the model's memory estimate
// checked against the device's free memory, before the model is built.
TextGenerator load_generator(const std::string& checkpoint, Device device = Device::cpu(), bool memory_check = true);

// What is wrong with `prompt` for `tokenizer`, or "" when nothing is: invalid UTF-8 (the byte
// offset), or characters a character-level tokenizer does not know (each named, with its code
// point). Byte-level BPE knows every byte, so only the UTF-8 check applies to it.
std::string prompt_problem(const io::Tokenizer& tokenizer, std::string_view prompt);

// The token an empty prompt starts from: a newline when the tokenizer has one, else token 1 (a
// character tokenizer's first character; 0 is its <unk>), else 0.
int32_t start_token(const io::Tokenizer& tokenizer);

// Picks a token from logits (V) f32: softmax(logits / temperature) restricted to the top k, then
// to the smallest set of most likely tokens whose probability reaches top_p, drawn with the
// counter-based RNG at (seed, index). Exposed for tests.
int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed, uint64_t index,
                     double top_p = 1.0);

}  // namespace trireme::train
