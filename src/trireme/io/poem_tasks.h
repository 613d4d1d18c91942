// The Chinese fine-tuning tasks shipped with trireme, built from the poems of the main job's corpus
// (Debian's fortunes-zh: tang300, the Tang poems, and song100, the Song poems; io/corpus.h):
//   dynasty.{train,val}.jsonl  {"text": poem, "label": "唐" | "宋"}       classification
//   poet.{train,val}.jsonl     {"text": poem, "label": poet}             the top_poets most frequent poets
//   sft.{train,val}.jsonl      {"prompt": "《title》\n作者：poet\n", "response": poem}
// The poem is its verse lines (no title, no author). The validation poems are the ones the main
// job holds out (split_corpus's documents for the same val_fraction and seed), so a model
// pretrained by the main job has not seen them.
//
//   PoemTasks t = write_poem_tasks("out/poem_tasks", 0.1, 1337, 5);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trireme/io/corpus.h"

namespace trireme::io {

struct Poem {
  std::string title, poet, body, dynasty;  // dynasty "唐" (tang300) or "宋" (song100)
};

// A cleaned poem document (title line, author line, verse lines) of `source`'s file.
Poem parse_poem(const Document& doc);

struct PoemTasks {
  int64_t poems = 0, val_poems = 0;
  std::vector<std::string> poets;  // the most frequent ones, most frequent first
  std::vector<std::string> files;
};

// Writes the six files into out_dir (created; every file written atomically).
PoemTasks write_poem_tasks(const std::string& out_dir, double val_fraction, uint64_t seed, int top_poets,
                           const std::string& fortunes_dir = default_fortunes_dir());

}  // namespace trireme::io
