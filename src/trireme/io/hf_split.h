// The split patterns of Hugging Face byte-level tokenizers, matched by hand over Unicode
// categories (io/unicode.h) exactly as Oniguruma, the `tokenizers` library's regex engine,
// matches them: leftmost alternative first, greedy, with its backtracking spelled out.
//
//   gpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   qwen2   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   llama3  the same with \p{N}{1,3}
//
// Every code point of a text is inside some match of these patterns, so the pieces cover the
// text. Other patterns are refused by hf_split_pattern_of, naming them.
//
//   HfSplitPattern p = *hf_split_pattern_of(pattern_from_tokenizer_json);
//   for (auto [begin, end] : hf_split(p, code_points)) ...   // code point ranges, in order
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trireme::io {

enum class HfSplitPattern { gpt2, qwen2, llama3 };

// The pattern whose regex source is `regex` (as written in tokenizer.json), or nullopt.
std::optional<HfSplitPattern> hf_split_pattern_of(std::string_view regex);
const char* hf_split_pattern_source(HfSplitPattern p);

// The matches of `p` in `text`, as [begin, end) indices of code points, covering the text.
std::vector<std::pair<size_t, size_t>> hf_split(HfSplitPattern p, std::u32string_view text);

}  // namespace trireme::io
