// The validation split: whole documents spread over the corpus, picked with a seed, the same for
// `trireme prepare` and `trireme train` (both run prepare_from_config).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/corpus.h"
#include "trireme/io/prepare.h"

namespace trireme::io {
namespace {

// The documents of a text joined as Corpus::text() joins them ("\n\n" between, "\n" at the end).
std::vector<std::string> documents_of(const std::string& text) {
  std::vector<std::string> docs;
  if (text.empty()) return docs;
  std::string_view rest(text);
  rest.remove_suffix(1);
  while (true) {
    size_t p = rest.find("\n\n");
    docs.emplace_back(rest.substr(0, p));
    if (p == std::string_view::npos) break;
    rest.remove_prefix(p + 2);
  }
  return docs;
}

// A folder of two kinds of text, one subfolder each, so that sorted by path all of one kind comes
// first: a split by tail would validate on the last kind only.
std::filesystem::path two_kinds_folder(const std::filesystem::path& root, int poems, int recipes) {
  std::filesystem::create_directories(root / "poems");
  std::filesystem::create_directories(root / "recipes");
  for (int i = 0; i < poems; ++i) {
    testing::write_file(root / "poems" / ("p" + std::to_string(100 + i) + ".txt"),
                        "poem " + std::to_string(i) + "\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。\n");
  }
  for (int i = 0; i < recipes; ++i) {
    testing::write_file(root / "recipes" / ("r" + std::to_string(100 + i) + ".txt"),
                        "recipe " + std::to_string(i) + "\nBoil the water, add the noodles, stir for five minutes.");
  }
  return root;
}

int count_kind(const std::vector<std::string>& docs, const std::string& kind) {
  return int(std::count_if(docs.begin(), docs.end(), [&](const std::string& d) { return d.starts_with(kind + " "); }));
}

TEST(ValidationSplit, FolderOfTwoKindsValidatesOnBoth) {
  auto dir = two_kinds_folder(testing::scratch_dir() / "corpus", 10, 10);
  Corpus corpus = load_corpus({dir.string()});
  ASSERT_EQ(corpus.documents.size(), 20u);
  for (uint64_t seed : {0, 1, 2, 1337, 99999}) {
    CorpusSplit s = split_corpus(corpus, 0.1, seed);
    std::vector<std::string> val = documents_of(s.val_text);
    EXPECT_EQ(val.size(), 2u);
    EXPECT_EQ(count_kind(val, "poem"), 1) << "seed " << seed << ": " << s.val_text;
    EXPECT_EQ(count_kind(val, "recipe"), 1) << "seed " << seed << ": " << s.val_text;
    EXPECT_FALSE(s.inside_document);
    EXPECT_NE(s.description.find("2 of 20 documents"), std::string::npos) << s.description;
  }
  // Uneven kinds: 30 poems then 17 recipes, 9 validation documents of about 5 each stretch.
  Corpus uneven = load_corpus({two_kinds_folder(testing::scratch_dir() / "uneven", 30, 17).string()});
  for (uint64_t seed : {0, 1, 2, 1337, 99999}) {
    std::vector<std::string> val = documents_of(split_corpus(uneven, 0.2, seed).val_text);
    EXPECT_EQ(val.size(), 9u);
    EXPECT_GE(count_kind(val, "poem"), 5) << seed;
    EXPECT_GE(count_kind(val, "recipe"), 2) << seed;
  }
}

TEST(ValidationSplit, EveryDocumentInExactlyOneSplit) {
  auto dir = two_kinds_folder(testing::scratch_dir() / "corpus", 30, 17);
  Corpus corpus = load_corpus({dir.string()});
  for (double f : {0.01, 0.1, 0.25, 0.5}) {
    CorpusSplit s = split_corpus(corpus, f, 7);
    const size_t n = corpus.documents.size();
    const size_t expected = std::clamp<size_t>(size_t(std::llround(f * double(n))), 1, n - 1);
    EXPECT_EQ(s.val_documents.size(), expected) << f;
    EXPECT_TRUE(std::is_sorted(s.val_documents.begin(), s.val_documents.end()));
    std::multiset<std::string> seen;
    for (const auto& d : documents_of(s.train_text)) seen.insert(d);
    for (const auto& d : documents_of(s.val_text)) seen.insert(d);
    std::multiset<std::string> all;
    for (const auto& d : corpus.documents) all.insert(d.text);
    EXPECT_EQ(seen, all) << f;
    std::vector<std::string> val = documents_of(s.val_text);
    ASSERT_EQ(val.size(), s.val_documents.size());
    for (size_t i = 0; i < val.size(); ++i) EXPECT_EQ(val[i], corpus.documents[s.val_documents[i]].text);
  }
}

TEST(ValidationSplit, DeterministicForASeed) {
  std::vector<size_t> a = choose_validation_documents(409, 0.1, 1337);
  EXPECT_EQ(a, choose_validation_documents(409, 0.1, 1337));
  EXPECT_EQ(a.size(), 41u);
  // Pinned: the generator is our own (SplitMix64), so these are the same with every compiler.
  EXPECT_EQ(choose_validation_documents(10, 0.2, 1), (std::vector<size_t>{0, 9}));
  bool some_seed_differs = false;
  for (uint64_t seed = 1; seed < 6; ++seed) some_seed_differs |= choose_validation_documents(409, 0.1, seed) != a;
  EXPECT_TRUE(some_seed_differs);
  // Spread: one document from each tenth of the corpus.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GE(a[i], i * 409 / 41);
    EXPECT_LT(a[i], (i + 1) * 409 / 41);
  }
}

TEST(ValidationSplit, AtLeastOneDocumentAndNoneForZero) {
  EXPECT_EQ(choose_validation_documents(3, 0.1, 5).size(), 1u);
  EXPECT_EQ(choose_validation_documents(2, 0.5, 5).size(), 1u);
  EXPECT_TRUE(choose_validation_documents(50, 0.0, 5).empty());
  EXPECT_THROW(choose_validation_documents(50, 1.0, 5), Error);
  Corpus c{{{"a", "one"}, {"b", "two"}, {"c", "three"}}};
  CorpusSplit s = split_corpus(c, 0.0, 5);
  EXPECT_EQ(s.train_text, c.text());
  EXPECT_TRUE(s.val_text.empty());
}

TEST(ValidationSplit, OneDocumentIsSplitInsideAndSaysSo) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "line " + std::to_string(i) + " of the only book\n";
  text.pop_back();
  Corpus c{{{"book.txt", text}}};
  CorpusSplit s = split_corpus(c, 0.1, 5);
  EXPECT_TRUE(s.inside_document);
  EXPECT_EQ(s.train_text + s.val_text, text + "\n");
  EXPECT_TRUE(s.val_text.starts_with("line 4")) << s.val_text;  // the tail, from a line start
  EXPECT_NE(s.description.find("book.txt"), std::string::npos) << s.description;
  EXPECT_NE(s.description.find("split inside the document"), std::string::npos) << s.description;
}

TEST(ValidationSplit, PreparedShardsHoldTheSplit) {
  auto root = testing::scratch_dir();
  auto dir = two_kinds_folder(root / "corpus", 10, 10);
  DataConfig data = Config().resolve().data;
  data.corpus = {dir.string()};
  PreparedDataset p = prepare_from_config(data, (root / "out").string());
  EXPECT_NE(p.split.find("2 of 20 documents"), std::string::npos) << p.split;
  PreparedData d = load_prepared_dataset((root / "out").string());
  std::vector<std::string> val = documents_of(d.tokenizer->decode(d.val.tokens));
  EXPECT_EQ(count_kind(val, "poem"), 1);
  EXPECT_EQ(count_kind(val, "recipe"), 1);
  EXPECT_EQ(documents_of(d.tokenizer->decode(d.train.tokens)).size(), 18u);
  // The same split again, byte for byte.
  prepare_from_config(data, (root / "again").string());
  EXPECT_EQ(testing::read_file(root / "out" / "val.bin"), testing::read_file(root / "again" / "val.bin"));
}

}  // namespace
}  // namespace trireme::io
