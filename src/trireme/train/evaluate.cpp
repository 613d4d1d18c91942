// Perplexity over windows of a text (see evaluate.h).
#include "trireme/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "trireme/autograd/grad_mode.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/io/utf8.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/train/step_runner.h"

namespace trireme::train {

namespace {
int64_t code_points(std::string_view s) { return int64_t(io::utf8_decode(s).size()); }

// One window: inputs ids[begin, begin + len), targets ids[begin + 1, begin + len + 1), of which
// the first `skip` were scored by an earlier window.
struct Window {
  int64_t begin, len, skip;
};
}  // namespace

TextScore score_text(models::GPT& model, const io::Tokenizer& tokenizer, std::string_view text, ScoreOptions options,
                     const std::string& what) {
  if (text.empty()) throw EvalInputError(str_cat(what, " is empty; give a text of at least 2 tokens"));
  const std::vector<int32_t> ids = tokenizer.encode(text);
  const int64_t n = int64_t(ids.size());
  if (n < 2) {
    throw EvalInputError(str_cat(what, " is ", n, " token long; perplexity needs at least 2 tokens (one to predict ",
                                 "from, one to predict)"));
  }
  const int64_t T = model.config().block_size;
  const int64_t stride = options.stride > 0 ? options.stride : T;
  TRIREME_CHECK(stride <= T, "eval: the stride (", stride, ") must be at most the model's block_size (", T, ")");
  TRIREME_CHECK(options.batch_size >= 1, "eval: the batch size must be at least 1, got ", options.batch_size);

  TextScore s;
  s.tokens = n;
  s.stride = stride;
  if (dynamic_cast<const io::CharTokenizer*>(&tokenizer)) {
    s.unknown_tokens = std::count(ids.begin(), ids.end(), io::CharTokenizer::kUnk);
  }
  // Windows start every `stride` tokens until one reaches the last token.
  std::vector<Window> windows;
  int64_t scored_to = 0;  // targets at positions <= scored_to are done
  for (int64_t begin = 0; scored_to < n - 1; begin += stride) {
    const int64_t len = std::min(T, n - 1 - begin);
    windows.push_back({begin, len, scored_to - begin});
    scored_to = begin + len;
  }
  s.windows = int64_t(windows.size());

  NoGradGuard no_grad;
  model.eval();
  const Device device = model.parameters().front().device();
  double total_nats = 0;
  int64_t total_scored = 0;
  // Consecutive windows of one length go through the model together.
  for (size_t w = 0; w < windows.size();) {
    size_t end = w + 1;
    while (end < windows.size() && int64_t(end - w) < options.batch_size && windows[end].len == windows[w].len) ++end;
    const int64_t B = int64_t(end - w), L = windows[w].len;
    std::vector<int64_t> in(size_t(B * L)), target(size_t(B * L));
    int64_t scored = 0;
    for (int64_t b = 0; b < B; ++b) {
      const Window& win = windows[w + size_t(b)];
      for (int64_t t = 0; t < L; ++t) {
        in[size_t(b * L + t)] = ids[size_t(win.begin + t)];
        const bool keep = t >= win.skip;
        target[size_t(b * L + t)] = keep ? ids[size_t(win.begin + t + 1)] : -100;  // -100: not scored
        scored += keep;
      }
    }
    const Tensor loss = model.loss(from_vector(in, {B, L}, device), from_vector(target, {B, L}, device));
    total_nats += host_value(loss) * double(scored);  // loss is the mean over the scored targets
    total_scored += scored;
    w = end;
  }
  s.scored_tokens = total_scored;
  s.scored_characters = code_points(text) - code_points(tokenizer.decode(std::vector<int32_t>{ids[0]}));
  s.nats_per_token = total_nats / double(total_scored);
  s.bits_per_token = s.nats_per_token / std::numbers::ln2;
  s.perplexity = std::exp(s.nats_per_token);
  if (s.scored_characters > 0) {
    s.nats_per_char = total_nats / double(s.scored_characters);
    s.bits_per_char = s.nats_per_char / std::numbers::ln2;
  }
  return s;
}

}  // namespace trireme::train
