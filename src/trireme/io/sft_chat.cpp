// Chat-template rendering of SFT examples (see sft_chat.h, Note [chat template loss mask]).
#include "trireme/io/sft_chat.h"

#include <algorithm>

#include "trireme/io/config.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

namespace {

// A short, printable view of text around byte `at`, for the error that shows where two renderings part.
std::string excerpt(const std::string& s, size_t at) {
  const size_t b = at > 20 ? at - 20 : 0;
  std::string out = utf8_sanitize(s.substr(b, 40));
  std::string shown;
  for (char c : out) shown += c == '\n' ? std::string("\\n") : std::string(1, c);
  return "\"" + shown + "\"";
}

}  // namespace

bool ends_with_end_of_turn(const std::string& response, const std::string& eos) {
  size_t end = response.size();
  while (end > 0 && (response[end - 1] == ' ' || response[end - 1] == '\n' || response[end - 1] == '\t' ||
                     response[end - 1] == '\r'))
    --end;
  const std::string_view body(response.data(), end);
  // The end-of-turn tokens of the common chat formats, besides the tokenizer's eos_token.
  for (const std::string& t : {eos, std::string("<|im_end|>"), std::string("<|eot_id|>"), std::string("<|endoftext|>"),
                               std::string("</s>"), std::string("<|end|>")})
    if (!t.empty() && body.ends_with(t)) return true;
  return false;
}

void apply_chat_template(std::vector<SftExample>& examples, const ChatTemplate& templ, const ChatTokens& tokens,
                         const std::string& path) {
  for (SftExample& ex : examples) {
    const std::string where = str_cat(path, " line ", ex.line);
    nlohmann::ordered_json messages = ex.messages;
    if (messages.is_null())
      messages = {{{"role", "user"}, {"content", ex.prompt}}, {{"role", "assistant"}, {"content", ex.response}}};
    nlohmann::ordered_json before_last = messages;
    before_last.erase(before_last.size() - 1);
    std::string prompt, full;
    try {
      prompt = templ.render_conversation(before_last, /*add_generation_prompt=*/true, tokens.bos, tokens.eos);
      full = templ.render_conversation(messages, /*add_generation_prompt=*/false, tokens.bos, tokens.eos);
    } catch (const ConfigError& e) {
      throw ConfigError(str_cat(where, ": ", e.what()));
    }
    if (!full.starts_with(prompt)) {
      const size_t at = size_t(std::mismatch(prompt.begin(), prompt.end(), full.begin(), full.end()).first - prompt.begin());
      throw ConfigError(str_cat(where, ": the chat template (", templ.origin(),
                                ") cannot be split into prompt and response: the conversation without its last "
                                "message, with the generation prompt, renders as ",
                                excerpt(prompt, at), " where the whole conversation renders ", excerpt(full, at),
                                " (byte ", at, "); the template renders earlier turns differently once the "
                                "assistant's answer follows. Use a template without that dependence, or "
                                "finetune.template"));
    }
    ex.response = full.substr(prompt.size());
    ex.prompt = std::move(prompt);
    if (ex.response.empty())
      throw ConfigError(str_cat(where, ": the chat template (", templ.origin(),
                                ") renders the assistant's last message as nothing; the loss would count no token"));
    ex.ends_turn = ends_with_end_of_turn(ex.response, tokens.eos);
  }
}

}  // namespace trireme::io
