// Supervised fine-tuning data (see sft.h).
#include "trireme/io/sft.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "trireme/core/error.h"
#include "trireme/io/config.h"
#include "trireme/io/example_lines.h"
#include "trireme/io/tokenizer_hf.h"

namespace trireme::io {

namespace {

constexpr int kMaxLineNesting = 64;

const std::string& string_field(const nlohmann::ordered_json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw ConfigError(str_cat(where, ": no \"", key, "\""));
  if (!j[key].is_string()) throw ConfigError(str_cat(where, ": \"", key, "\" must be a string, got ", j[key].dump()));
  return j[key].get_ref<const std::string&>();
}

}  // namespace

SftExample parse_sft_line(const std::string& line, const std::string& where) {
  // Ordered: a chat template's tojson writes a message's keys in the order the file has them.
  // Nesting is bounded: the conversation is copied and walked recursively later.
  int deepest = 0;
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(
      line, [&](int depth, nlohmann::ordered_json::parse_event_t, nlohmann::ordered_json&) {
        deepest = std::max(deepest, depth);
        return true;
      },
      /*allow_exceptions=*/false);
  if (deepest > kMaxLineNesting)
    throw ConfigError(str_cat(where, ": JSON nested more than ", kMaxLineNesting, " deep"));
  if (j.is_discarded() || !j.is_object())
    throw ConfigError(str_cat(where, ": not a JSON object (expected {\"prompt\": ..., \"response\": ...} or ",
                              "{\"messages\": [...]})"));
  SftExample ex;
  if (j.contains("messages")) {
    const auto& m = j["messages"];
    if (!m.is_array() || m.size() < 2)
      throw ConfigError(str_cat(where, ": \"messages\" must be an array of at least two messages"));
    for (size_t i = 0; i < m.size(); ++i) {
      if (!m[i].is_object()) throw ConfigError(str_cat(where, ": message ", i, " is not an object"));
      const std::string& role = string_field(m[i], "role", str_cat(where, ": message ", i));
      const std::string& content = string_field(m[i], "content", str_cat(where, ": message ", i));
      if (i + 1 == m.size()) {
        if (role != "assistant")
          throw ConfigError(str_cat(where, ": the last message must be the assistant's (the response), got role \"",
                                    role, "\""));
        ex.response = content;
      } else {
        ex.prompt += m.size() == 2 ? content : str_cat(i ? "\n" : "", role, ": ", content);
      }
    }
    ex.messages = m;
  } else {
    ex.prompt = string_field(j, "prompt", where);
    ex.response = string_field(j, "response", where);
  }
  if (ex.response.empty()) throw ConfigError(str_cat(where, ": the response is empty"));
  return ex;
}

SftFile read_sft_file(const std::string& path, bool skip_bad_lines) {
  SftFile out;
  out.skipped = read_example_lines(path, skip_bad_lines, [&](const std::string& line, const std::string& where, int64_t n) {
    SftExample ex = parse_sft_line(line, where);
    ex.line = n;
    out.examples.push_back(std::move(ex));
  });
  if (out.examples.empty()) throw ConfigError(str_cat("finetune: '", path, "' has no examples"));
  return out;
}

std::vector<int32_t> sft_end_tokens(const Tokenizer& tokenizer) {
  if (const auto* hf = dynamic_cast<const HfTokenizer*>(&tokenizer)) {
    for (const char* t : {"<|endoftext|>", "<|im_end|>", "</s>"})
      if (auto id = hf->token_id(t)) return {*id};
  }
  return tokenizer.encode("\n");
}

PackedSequences pack_sft(const std::vector<SftExample>& examples, const Tokenizer& tokenizer, const std::string& templ,
                         int64_t block_size, bool pack) {
  const size_t p = templ.find("{prompt}"), r = templ.find("{response}");
  TRIREME_CHECK(p != std::string::npos && r != std::string::npos && p < r && r + 10 == templ.size(),
                "finetune.template: expected {prompt} followed by {response} at its end, got \"", templ, "\"");
  const std::string before = templ.substr(0, p), between = templ.substr(p + 8, r - p - 8);
  const std::vector<int32_t> end = sft_end_tokens(tokenizer);
  const size_t L = size_t(block_size) + 1;
  PackedSequences out;
  size_t used = 0;  // tokens in the current (last) sequence
  auto close_sequence = [&] {
    if (used == 0) return;
    out.tokens.insert(out.tokens.end(), L - used, end.front());
    out.loss_mask.insert(out.loss_mask.end(), L - used, 0);
    used = 0;
  };
  for (const SftExample& ex : examples) {
    std::vector<int32_t> ids = tokenizer.encode(before + ex.prompt + between);
    std::vector<uint8_t> mask(ids.size(), 0);
    for (const auto& part : {tokenizer.encode(ex.response), ex.ends_turn ? std::vector<int32_t>{} : end}) {
      ids.insert(ids.end(), part.begin(), part.end());
      mask.insert(mask.end(), part.size(), 1);
    }
    if (ids.size() > L) {
      ids.resize(L), mask.resize(L);
      ++out.truncated;
    }
    if (!pack || used + ids.size() > L) close_sequence();
    if (used == 0) ++out.sequences;
    // The first token of a sequence is never a target.
    if (used == 0) mask[0] = 0;
    out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
    out.loss_mask.insert(out.loss_mask.end(), mask.begin(), mask.end());
    for (uint8_t m : mask) out.response_tokens += m;
    used += ids.size();
    ++out.examples;
  }
  close_sequence();
  return out;
}

}  // namespace trireme::io
