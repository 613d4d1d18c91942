// Corpus loading: the cleaned fortunes-zh poems and arbitrary UTF-8 files and folders.
#include <gtest/gtest.h>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/corpus.h"

namespace trireme::io {
namespace {

using testing::scratch_dir;
using testing::write_file;

TEST(Corpus, ParsesFortuneFormat) {
  std::string raw =
      "\x1b[32m《静夜思》\x1b[m\n\x1b[33m作者：李白\x1b[m\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n%\n"
      "\x1b[32m题目:《春居杂兴》二首\x1b[m\n作者:王禹偁\n\n            其一\n\n两株桃杏映篱斜，\n%\n";
  auto docs = parse_fortune_file(raw, "x");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].text, "《静夜思》\n作者：李白\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。");
  EXPECT_EQ(docs[1].text, "题目:《春居杂兴》二首\n作者:王禹偁\n其一\n两株桃杏映篱斜，");
  Corpus c{docs};
  EXPECT_EQ(c.text(), docs[0].text + "\n\n" + docs[1].text + "\n");
  EXPECT_EQ(c.bytes(), c.text().size());
}

TEST(Corpus, StripsAnsiEscapes) {
  EXPECT_EQ(strip_ansi_escapes("\x1b[1;32mgreen\x1b[0m \x1b[m!"), "green !");
  EXPECT_EQ(strip_ansi_escapes("a\x1b" "cb"), "ab");  // a two-byte escape
  EXPECT_EQ(strip_ansi_escapes("end\x1b"), "end");
}

TEST(Corpus, DefaultPoemsAreClean) {
  if (!testing::poems_installed()) GTEST_SKIP() << "fortunes-zh is not installed";
  Corpus c = load_poem_corpus();
  std::string text = c.text();
  EXPECT_GT(c.documents.size(), 350u);
  EXPECT_GT(text.size(), 100000u);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\n%\n"), std::string::npos);
  EXPECT_NE(text.rfind("%\n", 0), 0u);
  EXPECT_EQ(text.find("\n\n\n"), std::string::npos);
  // This edition titles 李白's 静夜思 as 《夜思》.
  EXPECT_NE(text.find("《夜思》\n作者：李白\n床前明月光，疑是地上霜。"), std::string::npos);
  EXPECT_NE(text.find("床前明月光"), std::string::npos);
  EXPECT_NE(text.find("作者：李白"), std::string::npos);
  for (const auto& d : c.documents) {
    EXPECT_EQ(d.text.find("\n\n"), std::string::npos) << d.text;  // a blank line only between poems
    EXPECT_TRUE(d.text.starts_with("《") || d.text.starts_with("题目")) << d.text.substr(0, 40);
  }
  EXPECT_EQ(load_corpus({"tang"}).text(), text);
}

TEST(Corpus, MissingDefaultCorpusSaysWhatToInstall) {
  try {
    load_poem_corpus("/nonexistent/fortunes");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fortunes-zh"), std::string::npos) << e.what();
  }
}

TEST(Corpus, FoldersAreReadSortedAndRecursively) {
  auto dir = scratch_dir();
  std::filesystem::create_directories(dir / "b");
  std::filesystem::create_directories(dir / ".git");
  write_file(dir / "b" / "2.txt", "second\n");
  write_file(dir / "a.txt", "\xEF\xBB\xBF" "first\r\n\r\n");
  write_file(dir / "c.txt", "third 😀");
  write_file(dir / ".hidden", "no");
  write_file(dir / ".git" / "x", "no");
  Corpus c = load_text_corpus({dir.string()});
  ASSERT_EQ(c.documents.size(), 3u);
  EXPECT_EQ(c.text(), "first\n\nsecond\n\nthird 😀\n");
  EXPECT_TRUE(c.documents[1].source.ends_with("b/2.txt"));
  // A file named on its own, then a folder: given order, each folder sorted.
  Corpus d = load_corpus({(dir / "c.txt").string(), (dir / "b").string()});
  EXPECT_EQ(d.text(), "third 😀\n\nsecond\n");
}

TEST(Corpus, InvalidUtf8IsAnErrorNamingFileAndOffset) {
  auto dir = scratch_dir();
  write_file(dir / "bad.txt", "line one\n\xe6\x98\x8e\xff rest");
  try {
    load_text_corpus({(dir / "bad.txt").string()});
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad.txt"), std::string::npos) << msg;
    EXPECT_NE(msg.find("byte 12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
  }
  EXPECT_THROW(load_text_corpus({(dir / "missing.txt").string()}), Error);
}

}  // namespace
}  // namespace trireme::io
