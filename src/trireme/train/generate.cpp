// Text generation (see generate.h). No KV cache: each token reruns the model over the last
// block_size tokens, which is fine for the small models trained on the CPU here.
#include "trireme/train/generate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/io/config.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/step_runner.h"

namespace trireme::train {

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, uint64_t seed, uint64_t index) {
  const int64_t V = int64_t(logits.size());
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
  for (int64_t i = 0; i < k; ++i) total += p[size_t(i)] = std::exp((logits[size_t(order[size_t(i)])] - top) / temperature);
  double u = rng_uniform_f64(seed, 0x67656e, index) * total;
  for (int64_t i = 0; i < k; ++i) {
    u -= p[size_t(i)];
    if (u < 0) return order[size_t(i)];
  }
  return order[size_t(k - 1)];
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

std::string TextGenerator::generate(const std::string& prompt, const SamplingOptions& o,
                                    const std::function<void(std::string_view)>& on_text) {
  TRIREME_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  TRIREME_CHECK(o.temperature >= 0, "generate: temperature must be >= 0");
  NoGradGuard no_grad;
  std::vector<int32_t> ids = tokenizer_->encode(prompt);
  TRIREME_CHECK(!ids.empty(), "generate: the prompt is empty; give at least one character");
  const int64_t T = model_->config().block_size;
  const Device device = model_->parameters().front().device();
  std::vector<int32_t> generated;
  std::string text;
  size_t emitted = 0;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const size_t ctx_len = std::min<size_t>(ids.size(), size_t(T));
    std::vector<int64_t> ctx(ids.end() - std::ptrdiff_t(ctx_len), ids.end());
    Tensor logits = model_->forward(from_vector(ctx, {1, int64_t(ctx_len)}, device));  // (1, t, V)
    const int64_t V = logits.size(-1);
    Tensor last = to_dtype(reshape(narrow(logits, 1, int64_t(ctx_len) - 1, 1), {V}), DType::f32);
    if (!device.is_cpu()) last = to_device(last, Device::cpu());
    int32_t next = sample_token(last.to_vector<float>(), o.temperature, o.top_k, o.seed, uint64_t(i));
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

TextGenerator load_generator(const std::string& checkpoint, Device device) {
  if (device.is_cuda()) {
    TRIREME_CHECK(cuda::is_available(), "generate: the device is ", device.str(), ", but no GPU can be used: ",
                  cuda::unavailable_reason());
    TRIREME_CHECK(device.index < cuda::device_count(), "generate: the device is ", device.str(), ", but this machine has ",
                  cuda::device_count(), " GPU(s)");
#ifdef TRIREME_WITH_CUDA
    cuda::set_device(device.index);
#endif
  }
  auto dir = find_latest_checkpoint(checkpoint);
  TRIREME_CHECK(dir.has_value(), "no checkpoint found at '", checkpoint,
                "' (give a checkpoint folder or a training run's out_dir)");
  Checkpoint ck = load_checkpoint(*dir);
  TRIREME_CHECK(ck.state.contains("config") && ck.state.contains("tokenizer"), "checkpoint '", dir->string(),
                "' has no config or tokenizer in state.json");
  io::TrainConfig cfg = io::Config::parse(ck.state["config"].get<std::string>(), dir->string() + "/state.json").resolve();
  auto tok = io::tokenizer_from_json(ck.state["tokenizer"]);
  models::GPTConfig gc = gpt_config(cfg, tok->vocab_size());
  auto model = std::make_unique<models::GPT>(gc, 0);
  model->load_state_dict(ck.model);
  if (!device.is_cpu()) model->to(device);
  return TextGenerator(std::move(model), std::move(tok));
}

}  // namespace trireme::train
