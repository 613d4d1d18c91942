// Text generation (see generate.h). No KV cache: each token reruns the model over the last
// block_size tokens, which is fine for the small models trained on the CPU here.
#include "trireme/train/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <set>

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/io/utf8.h"
#include "trireme/kernels/varying_shapes.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/train/trained_model.h"

namespace trireme::train {

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed, uint64_t index,
                     double top_p) {
  const int64_t V = int64_t(logits.size());
  TRIREME_CHECK(V > 0, "sample_token: no logits");
  TRIREME_CHECK(top_p > 0 && top_p <= 1, "sample_token: top_p must be in (0, 1], got ", top_p);
  if (temperature <= 0) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  // Ties break toward the lower id so the draw is a pure function of the inputs.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  std::vector<double> p(static_cast<size_t>(k));
  const double top = logits[size_t(order[0])];
  double total = 0;
  for (int64_t i = 0; i < k; ++i)
    total += p[size_t(i)] = std::exp((logits[size_t(order[size_t(i)])] - top) / temperature);
  if (top_p < 1) {  // the nucleus: the most likely tokens until their probability reaches top_p
    double kept = 0;
    int64_t n = 0;
    while (n < k && kept < top_p * total) kept += p[size_t(n++)];
    k = std::max<int64_t>(n, 1);
    total = kept > 0 ? kept : p[0];
  }
  double u = rng_uniform_f64(seed, 0x67656e, index) * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= p[size_t(i)];
    if (u < 0) return order[size_t(i)];
  }
  return order[size_t(k - 1)];
}

std::string prompt_problem(const io::Tokenizer& tokenizer, std::string_view prompt) {
  if (size_t bad = io::utf8_find_invalid(prompt); bad != std::string_view::npos) {
    return str_cat("the prompt is not valid UTF-8 (byte ", bad, " of ", prompt.size(), ")");
  }
  const auto* chars = dynamic_cast<const io::CharTokenizer*>(&tokenizer);
  if (!chars) return "";
  std::set<char32_t> unknown;
  for (size_t pos = 0; pos < prompt.size();) {
    const io::Utf8Char c = io::utf8_next(prompt, pos);
    if (chars->encode(prompt.substr(pos, c.length)).front() == io::CharTokenizer::kUnk) unknown.insert(c.code_point);
    pos += c.length;
  }
  if (unknown.empty()) return "";
  std::string list;
  int shown = 0;
  for (char32_t c : unknown) {
    if (shown++ == 10) {
      list += str_cat(" and ", unknown.size() - 10, " more");
      break;
    }
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", unsigned(c));
    std::string glyph;
    if (c >= 0x20 && c != 0x7F) io::utf8_append(glyph, c);
    list += str_cat(list.empty() ? "" : ", ", glyph.empty() ? "" : "'" + glyph + "' ", "(", code, ")");
  }
  return str_cat("the prompt has ", unknown.size(), " character", unknown.size() == 1 ? "" : "s",
                 " the checkpoint's tokenizer does not know: ", list,
                 "; the model never saw them in training: remove or replace them");
}

int32_t start_token(const io::Tokenizer& tokenizer) {
  const std::vector<int32_t> newline = tokenizer.encode("\n");
  const auto* chars = dynamic_cast<const io::CharTokenizer*>(&tokenizer);
  if (newline.size() == 1 && !(chars && newline[0] == io::CharTokenizer::kUnk)) return newline[0];
  return tokenizer.vocab_size() > 1 ? 1 : 0;
}

TextGenerator::TextGenerator(std::unique_ptr<models::GPT> model, std::unique_ptr<io::Tokenizer> tokenizer)
    : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {
  model_->eval();
}

namespace {
// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size(), i = n;
  for (int back = 0; back < 4 && i > 0; ++back) {
    unsigned char c = static_cast<unsigned char>(s[--i]);
    if ((c & 0xC0) != 0x80) {  // a lead byte (or ASCII): is its sequence complete?
      size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      return i + need <= n ? n : i;
    }
  }
  return n;
}
}  // namespace

int64_t static_context_bucket(int64_t length, int64_t block_size) {
  int64_t bucket = 16;
  while (bucket < length) bucket *= 2;
  return std::min(bucket, block_size);
}

std::vector<float> TextGenerator::next_token_logits(const std::vector<int32_t>& ids) {
  TRIREME_CHECK(!ids.empty(), "generate: no context");
  NoGradGuard no_grad;
  const int64_t T = model_->config().block_size;
  const Device device = model_->parameters().front().device();
  const int64_t ctx_len = std::min<int64_t>(int64_t(ids.size()), T);
  std::vector<int64_t> ctx(ids.end() - std::ptrdiff_t(ctx_len), ids.end());
  Tensor last;  // (1, V)
  if (mode_ == GenerateMode::eager) {
    // A new length each token: no kernel should build a plan for it (kernels/varying_shapes.h).
    kernels::VaryingShapes varying;
    Tensor logits = model_->forward(from_vector(ctx, {1, ctx_len}, device));  // (1, t, V)
    last = reshape(narrow(logits, 1, ctx_len - 1, 1), {1, logits.size(-1)});
  } else {
    if (!static_forward_) {
      // The row to keep is an input, not a constant: one graph serves every length of its bucket.
      // It is gathered as an embedding lookup, whose kernel reads the index on the device (so a
      // CUDA graph holds it; index_select checks its indices on the host).
      static_forward_ = std::make_unique<graph::StaticFunction>(
          [this](const std::vector<Tensor>& in) -> std::vector<Tensor> {
            Tensor logits = model_->forward(in[0]);  // (1, L, V)
            return {embedding(reshape(logits, {logits.size(1), logits.size(2)}), in[1])};
          },
          graph::StaticOptions{.max_graphs = 16});
    }
    // Padding repeats the last token; causal attention keeps it out of the positions before it.
    ctx.resize(size_t(static_context_bucket(ctx_len, T)), ctx.back());
    last = (*static_forward_)({from_vector(ctx, {1, int64_t(ctx.size())}, device),
                               from_vector(std::vector<int64_t>{ctx_len - 1}, {1}, device)})[0];
  }
  last = to_dtype(reshape(last, {last.size(-1)}), DType::f32);
  if (!device.is_cpu()) last = to_device(last, Device::cpu());
  return last.to_vector<float>();
}

std::string TextGenerator::generate(const std::string& prompt, const SamplingOptions& o,
                                    const std::function<void(std::string_view)>& on_text) {
  TRIREME_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  TRIREME_CHECK(o.temperature >= 0, "generate: temperature must be >= 0");
  TRIREME_CHECK(o.top_p > 0 && o.top_p <= 1, "generate: top_p must be in (0, 1], got ", o.top_p);
  TRIREME_CHECK(o.max_new_tokens < (int64_t(1) << 32), "generate: max_new_tokens must be below 2^32");
  const std::string problem = prompt_problem(*tokenizer_, prompt);
  TRIREME_CHECK(problem.empty(), "generate: ", problem);
  NoGradGuard no_grad;
  std::vector<int32_t> ids =
      prompt.empty() ? std::vector<int32_t>{start_token(*tokenizer_)} : tokenizer_->encode(prompt);
  std::vector<int32_t> generated;
  std::string text;
  size_t emitted = 0;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    // Sample s draws at indices s * 2^32 + i: sample 0 is what one sample always drew.
    int32_t next =
        sample_token(next_token_logits(ids), o.temperature, o.top_k, o.seed, (o.sample << 32) + uint64_t(i), o.top_p);
    ids.push_back(next);
    generated.push_back(next);
    text = tokenizer_->decode(generated);
    size_t ready = complete_utf8_prefix(text);
    if (on_text && ready > emitted) {
      on_text(std::string_view(text).substr(emitted, ready - emitted));
      emitted = ready;
    }
  }
  if (on_text && text.size() > emitted) on_text(std::string_view(text).substr(emitted));
  return text;
}

TextGenerator load_generator(const std::string& checkpoint, Device device, bool memory_check) {
  TrainedModel m = load_trained_model(checkpoint, device, "generate", memory_check);
  return TextGenerator(std::move(m.model), std::move(m.tokenizer));
}

}  // namespace trireme::train
