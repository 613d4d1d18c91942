// Hugging Face chat templates: the Jinja text in a tokenizer_config.json's "chat_template" that
// turns a conversation into the model's prompt format, rendered as transformers'
// apply_chat_template(tokenize=False) does (Jinja with trim_blocks and lstrip_blocks, and
// transformers' tojson and raise_exception).
//
// The subset of Jinja (docs/FINETUNING.md lists it for users):
//   tags         {{ expr }}, {% if/elif/else/endif %}, {% for a[, b] in xs [if c] %} ... [{% else %}]
//                {% endfor %} with loop.index/index0/revindex/revindex0/first/last/length,
//                {% set x = expr %}, {% set ns.x = expr %}, {% set x %}...{% endset %},
//                {% break %}, {% continue %}, {% generation %}, {# comments #}, and the whitespace
//                control markers - and +
//   expressions  strings (Python escapes), integers, floats, true/false/none, lists, dicts; names,
//                a.b, a['b'], a[1], a[-1], a[1:], a[::-1]; + - * / // % ** ~; == != < > <= >=;
//                and or not; in, not in; is [not] defined/none/string/...; x if c else y;
//                filters (| trim, length, upper, lower, tojson, default, join, ...), string and
//                mapping methods (.strip(), .split(), .items(), .get(), ...); the functions
//                raise_exception(msg), namespace(...), range(...), dict(...)
// Unknown names are undefined: falsy, rendered as "", `is defined` false. Anything outside the
// subset (macros, includes, an unknown filter) is an io::ConfigError naming it and its line and
// column; so are malformed templates and raise_exception (with the template's message).
// Rendering is bounded (nesting depth of the template and of values, loop iterations, the
// values it builds and the work on them, output size): a hostile template gets an error, never
// a crash or a hang.
//
//   io::ChatTemplate t(config["chat_template"], "tokenizer_config.json");
//   std::string text = t.render_conversation(messages, /*add_generation_prompt=*/true, "<s>", "</s>");
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trireme::io {

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in errors ("finetune.chat_template", a file path).
  ChatTemplate(const std::string& source, std::string origin);

  // Renders with the variables of `context` (an object).
  std::string render(const nlohmann::ordered_json& context) const;
  // Renders the variables transformers gives: messages, add_generation_prompt, bos_token, eos_token.
  std::string render_conversation(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  const std::string& bos_token, const std::string& eos_token) const;

  const std::string& origin() const { return origin_; }

 private:
  std::shared_ptr<const std::vector<jinja::Node>> body_;
  std::string origin_;
};

}  // namespace trireme::io
