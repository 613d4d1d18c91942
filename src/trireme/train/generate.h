// Sampling text from a trained GPT: temperature, top-k, a seed, and text streamed as produced.
//
//   auto g = load_generator("out/checkpoints");           // model + tokenizer from a checkpoint
//   auto g = load_generator("out", Device::cuda(0));      // ... run on a GPU
//   g.generate("床前明月光", {.max_new_tokens = 64, .top_k = 20}, [](std::string_view piece) { ... });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "trireme/io/tokenizer.h"
#include "trireme/models/gpt.h"

namespace trireme::train {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no limit
  uint64_t seed = 0;
};

class TextGenerator {
 public:
  TextGenerator(std::unique_ptr<models::GPT> model, std::unique_ptr<io::Tokenizer> tokenizer);
  // Calls on_text with each new piece of complete UTF-8 text; returns the whole continuation.
  std::string generate(const std::string& prompt, const SamplingOptions& options,
                       const std::function<void(std::string_view)>& on_text = {});
  const models::GPT& model() const { return *model_; }
  const io::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::unique_ptr<models::GPT> model_;
  std::unique_ptr<io::Tokenizer> tokenizer_;
};

// Loads the model, its config and the tokenizer saved in a checkpoint (a checkpoint folder, or a
// run's out_dir / checkpoints folder, whose latest checkpoint is used), the model on `device`
// (a GPU must be usable: the error says why not).
TextGenerator load_generator(const std::string& checkpoint, Device device = Device::cpu());

// Picks a token from logits (V) f32: softmax(logits / temperature) restricted to the top k,
// drawn with the counter-based RNG at (seed, index). Exposed for tests.
int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed, uint64_t index);

}  // namespace trireme::train
