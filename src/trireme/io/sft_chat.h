// Supervised fine-tuning examples rendered through a Hugging Face chat template
// (finetune.chat_template, docs/FINETUNING.md), so the model learns the prompt format it will
// be served with.
//
// Note [chat template loss mask]
// The loss counts the assistant's last message as the template renders it. For a conversation
// whose last message is the assistant's:
//   prompt = render(messages[:-1], add_generation_prompt=true)
//   full   = render(messages,      add_generation_prompt=false)
//   response = full without its prefix `prompt`
// A prompt/response line is the conversation [{user: prompt}, {assistant: response}]. When the
// prompt is not a prefix of full (the template renders earlier turns differently once the last
// one is there), the example cannot be split: an io::ConfigError names the line. pack_sft then
// tokenizes prompt and response separately, as for a text template, so the mask starts on a
// token boundary.
// The end token: a template usually ends the assistant's turn itself (<|im_end|>, <|eot_id|>,
// eos_token); the response then already ends with it (ignoring trailing whitespace) and nothing
// is appended, so it is not doubled. A response that does not end with one gets the end token
// appended as with a text template, so the model still learns to stop.
//
//   io::ChatTemplate t(tokenizer_config["chat_template"], "tokenizer_config.json");
//   io::apply_chat_template(file.examples, t, {"<s>", "</s>"}, "train.jsonl");
//   io::PackedSequences p = io::pack_sft(file.examples, tok, io::kChatTemplateText, 64, true);
#pragma once

#include <string>
#include <vector>

#include "trireme/io/chat_template.h"
#include "trireme/io/sft.h"

namespace trireme::io {

// The bos_token and eos_token variables a chat template renders with ("" when the tokenizer has none).
struct ChatTokens {
  std::string bos, eos;
};

// The text template pack_sft gets for chat-rendered examples: the rendered parts as they are.
inline constexpr const char* kChatTemplateText = "{prompt}{response}";

// Replaces each example's prompt and response by the chat template's rendering (see the Note)
// and marks those whose response ends the turn. Errors (the template raises, cannot be split)
// are io::ConfigError naming `path` and the example's line.
void apply_chat_template(std::vector<SftExample>& examples, const ChatTemplate& templ, const ChatTokens& tokens,
                         const std::string& path);

// Whether `response` ends, but for trailing whitespace, with eos or a known end-of-turn token.
bool ends_with_end_of_turn(const std::string& response, const std::string& eos);

}  // namespace trireme::io
