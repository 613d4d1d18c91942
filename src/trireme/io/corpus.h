// Text corpora: the default Tang and Song poems, or any UTF-8 text files and folders.
//
// The default corpus is what Debian's fortunes-zh package installs under
// /usr/share/games/fortunes: `tang300` (唐诗三百首) and `song100` (宋词一百首). Those plain
// files are the UTF-8 text; `*.u8` are symlinks to them and `*.dat` are strfile's binary
// offset indexes, so only the plain files are read. Each poem there is a title line and an
// author line wrapped in terminal colour codes, then the poem, then a line holding "%".
//
//   Corpus poems = load_poem_corpus();                 // 409 documents
//   Corpus mine = load_corpus({"notes/", "book.txt"}); // folders are read recursively, sorted
//   std::string text = poems.text();                   // poems separated by one blank line
//   CorpusSplit s = split_corpus(mine, 0.1, 1337);      // whole documents for validation
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trireme::io {

// One document: a poem, or a whole text file. `text` has no trailing newline.
struct Document {
  std::string source;  // the file it came from
  std::string text;
};

struct Corpus {
  std::vector<Document> documents;

  // The documents joined by one blank line ("\n\n"), ending in "\n". For the poem corpus a
  // blank line therefore always marks a poem boundary (blank lines inside poems are removed).
  std::string text() const;
  size_t bytes() const;  // text().size() without building it
};

// Where the default poems live: $TRIREME_FORTUNES_DIR if set, else /usr/share/games/fortunes.
std::string default_fortunes_dir();

// The cleaned default corpus: tang300 then song100, poems in file order.
Corpus load_poem_corpus(const std::string& fortunes_dir = default_fortunes_dir());

// Cleans one fortune file: removes ANSI escape sequences (ESC [ ... final byte), splits on
// "%" lines, trims each line (the files indent some sub-headings with spaces) and drops blank
// lines inside a poem, so a poem is title, author and verse lines joined by "\n".
std::vector<Document> parse_fortune_file(std::string_view raw, const std::string& source);
std::string strip_ansi_escapes(std::string_view s);

// Reads UTF-8 text files; a folder contributes every regular file below it whose name does not
// start with '.', in sorted path order, so the result never depends on directory order. A file
// is one document (a leading byte-order mark and trailing newlines removed).
//
// Invalid UTF-8 is an error, not a silent replacement: training on U+FFFD noise from, say, a
// GBK file is never what was meant. The error names the file, the byte offset and the line.
Corpus load_text_corpus(const std::vector<std::string>& paths);

// A corpus from config specs: "tang" is the default poem corpus; anything else is a path.
Corpus load_corpus(const std::vector<std::string>& specs);

// The train/validation split, the same for `trireme prepare` and `trireme train`.
//
// Validation takes whole documents: round(val_fraction x documents), at least one and at most all
// but one. The document list is cut into that many equal consecutive stretches and one document is
// drawn from each with `seed`, so validation spans the whole corpus: a folder of two kinds of text
// (sorted by path, so one kind after the other) is validated on both kinds, and a split by tail
// would have validated on the last kind only. A one-document corpus is split inside the document
// instead (its tail, at a blank line or line break: split_point in token_shard.h); val_fraction 0
// holds out nothing. Deterministic for a seed on every platform.
struct CorpusSplit {
  std::string train_text, val_text;   // each as Corpus::text() joins its documents
  std::vector<size_t> val_documents;  // indices into the corpus, ascending; empty when split inside
  bool inside_document = false;       // a one-document corpus, split inside it
  std::string description;            // one line for the log: what was held out and how
};
CorpusSplit split_corpus(const Corpus& corpus, double val_fraction, uint64_t seed);

// Which of `n_documents` documents are held out (ascending), as split_corpus chooses them.
std::vector<size_t> choose_validation_documents(size_t n_documents, double val_fraction, uint64_t seed);

// Throws trireme::Error naming `what`, the byte offset and line when `text` is not valid UTF-8.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace trireme::io
