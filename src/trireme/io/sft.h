// Supervised fine-tuning data (docs/FINETUNING.md): JSONL files of prompt/response pairs or
// conversations, rendered through a text template, tokenized with a loss mask that counts the
// response only, and packed into block_size + 1 token sequences for the DataLoader (Note [packed
// sequences] in data_loader.h).
//
// A line is one JSON object, either
//   {"prompt": "...", "response": "..."}
//   {"messages": [{"role": "system"|"user"|"assistant"|..., "content": "..."}, ...]}
// For messages the last one must be the assistant's: it is the response, and the ones before it
// are the prompt (a single message's content as it is; several as "role: content" lines).
// Blank lines are skipped. Anything else is malformed: refused naming the file and the line, or
// with skip_bad_lines skipped and counted.
//
// One example is template[{prompt} -> prompt, {response} -> response] followed by the end token:
// the tokenizer's end-of-text token when it has one (<|endoftext|>, <|im_end|>, </s>), else a
// newline. With finetune.chat_template the prompt and response are rendered by a Hugging Face
// chat template instead (io/sft_chat.h). Its tokens are the prompt part's encoding then the response's (encoded separately, so
// the loss mask falls on a token boundary); the loss counts the response's tokens and the end
// token. Packing puts whole examples one after another into each sequence while they fit (an
// example longer than a sequence is cut to it, and counted); the rest of a sequence is padding
// whose loss does not count. Examples in one sequence see each other through causal attention
// (no per-document mask), as in most packed SFT.
//
//   auto ex = io::read_sft_file("train.jsonl", /*skip_bad_lines=*/false);
//   io::PackedSequences p = io::pack_sft(ex.examples, tok, "{prompt}\n{response}", 64, true);
//   io::DataLoader loader(p.tokens, p.loss_mask, 64, seed);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trireme/io/tokenizer.h"

namespace trireme::io {

struct SftExample {
  std::string prompt, response;
  int64_t line = 0;  // in its file
  // A {"messages": [...]} line's conversation as it was (for a chat template, io/sft_chat.h);
  // null for a prompt/response line.
  nlohmann::ordered_json messages;
  // The response already ends with an end-of-turn token (a chat template wrote it): pack_sft
  // appends no end token after it.
  bool ends_turn = false;
};

struct SftFile {
  std::vector<SftExample> examples;
  int64_t skipped = 0;  // malformed lines skipped (skip_bad_lines)
};

// Reads a JSONL file (see above); errors are io::ConfigError naming the file and the line.
SftFile read_sft_file(const std::string& path, bool skip_bad_lines);
// One line's example (the prompt and response), or throws io::ConfigError with `where` and why.
SftExample parse_sft_line(const std::string& line, const std::string& where);

struct PackedSequences {
  std::vector<int32_t> tokens;     // sequences of block_size + 1 tokens, end to end
  std::vector<uint8_t> loss_mask;  // 1: predicting this token counts
  int64_t sequences = 0, examples = 0, truncated = 0, response_tokens = 0;
};

// The token that ends an example (see above) and the one that pads a sequence.
std::vector<int32_t> sft_end_tokens(const Tokenizer& tokenizer);

// `templ` has one {prompt} and one {response} that ends it (checked by the config).
PackedSequences pack_sft(const std::vector<SftExample>& examples, const Tokenizer& tokenizer, const std::string& templ,
                         int64_t block_size, bool pack);

}  // namespace trireme::io
