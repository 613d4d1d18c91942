// Preparing data never leaves a partial or empty tokenizer.json or token shard under its final
// name: on a full disk the error names the file and the system's reason, and a process killed at
// any moment leaves the old complete set, or a folder without tokenizer.json (which loading refuses).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "io_test_util.h"
#include "trireme/core/error.h"
#include "trireme/io/prepare.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/io/utf8.h"

namespace trireme::io {
namespace {

namespace fs = std::filesystem;

// `n` distinct CJK characters, one line per 20: its char tokenizer's JSON (about 9 bytes a
// character) is far larger than its shards (2 bytes a token).
std::string distinct_characters(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    utf8_append(s, char32_t(0x4E00 + i));
    if (i % 20 == 19) s += '\n';
  }
  return s;
}

struct ChildResult {
  int status = -1;      // exit status, or 128 + signal
  std::string message;  // what the child wrote to the pipe (the error)
};

// Runs `body` in a forked child; the child writes the message of the trireme::Error it throws (if
// any) to a pipe and exits 1, or exits 0 when nothing was thrown; `body` may exit itself.
ChildResult in_child(const std::function<void()>& body) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    int code = 0;
    try {
      body();
    } catch (const Error& e) {
      std::string m = e.what();
      (void)!::write(fds[1], m.data(), m.size());
      code = 1;
    }
    ::_exit(code);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) r.message.append(buf, size_t(n));
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// No file in `dir` is empty, and no temporary of a prepared file is left behind.
void expect_no_empty_or_temporary_files(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    EXPECT_GT(fs::file_size(e.path()), 0u) << name << " is empty";
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << name << " left behind";
  }
}

// Each file under its final name is absent or complete.
void expect_complete_or_absent(const fs::path& dir) {
  for (const char* shard : {"train.bin", "val.bin"}) {
    if (fs::exists(dir / shard)) {
      EXPECT_NO_THROW(read_token_shard((dir / shard).string())) << shard;
    }
  }
  if (fs::exists(dir / "tokenizer.json")) {
    EXPECT_NO_THROW(load_tokenizer((dir / "tokenizer.json").string()));
  }
}

TEST(PrepareWriteSafety, FileTooLargeForTokenizerFailsNamingItAndWritesNothing) {
  auto dir = testing::scratch_dir() / "data";
  const std::string text = distinct_characters(3000);
  CharTokenizer tok = CharTokenizer::train(text);
  const size_t json_bytes = tok.to_json().dump(1).size();
  const size_t limit = 4 * 3000;  // above each shard (< 2 x 3000 bytes), below tokenizer.json
  ASSERT_GT(json_bytes, limit);
  ChildResult r = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG instead of killing
    rlimit lim{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    prepare_dataset(text, tok, dir.string(), 0.1);
  });
  EXPECT_EQ(r.status, 1) << r.message;
  EXPECT_NE(r.message.find("tokenizer.json"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("File too large"), std::string::npos) << r.message;
  EXPECT_TRUE(fs::is_empty(dir)) << "a file was written although the set was not";
  try {
    load_prepared_dataset(dir.string());
    ADD_FAILURE() << "an empty folder loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no train.bin, val.bin, tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(PrepareWriteSafety, FileTooLargeForShardKeepsTheOldCompleteSet) {
  auto dir = testing::scratch_dir() / "data";
  const std::string small = distinct_characters(200);
  CharTokenizer small_tok = CharTokenizer::train(small);
  prepare_dataset(small, small_tok, dir.string(), 0.1);
  std::string old_files;
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) old_files += testing::read_file(dir / f) + "|";
  const std::string big = std::string(200000, 'x') + "\n" + small;
  CharTokenizer big_tok = CharTokenizer::train(big);
  ChildResult r = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{100000, 100000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    prepare_dataset(big, big_tok, dir.string(), 0.1);
  });
  EXPECT_EQ(r.status, 1) << r.message;
  EXPECT_NE(r.message.find("'" + (dir / "train.bin").string() + "' not written"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("File too large"), std::string::npos) << r.message;
  std::string now;
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) now += testing::read_file(dir / f) + "|";
  EXPECT_EQ(now, old_files);  // the previous set, whole and usable
  EXPECT_NO_THROW(load_prepared_dataset(dir.string()));
  expect_no_empty_or_temporary_files(dir);
}

// A real full disk: a small tmpfs mounted in a private mount namespace of a child process (where
// the tests run as root, as in the development container; elsewhere the test is skipped).
TEST(PrepareWriteSafety, FullDiskFailsWithNoSpaceAndLeavesNoPartialFile) {
  auto root = testing::scratch_dir();
  const std::string text = distinct_characters(6000);
  CharTokenizer tok = CharTokenizer::train(text);
  ChildResult r = in_child([&] {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    // 32 KiB: the shards (about 11 and 1 KB) fit, tokenizer.json (about 55 KB) does not.
    if (::mount("tmpfs", root.c_str(), "tmpfs", 0, "size=32k") != 0) ::_exit(77);
    try {
      prepare_dataset(text, tok, (root / "data").string(), 0.1);
    } catch (const Error& e) {
      // The mount disappears with the child: report what is left in it through the message.
      std::string left;
      for (const auto& e2 : fs::directory_iterator(root / "data")) {
        left += " [" + e2.path().filename().string() + " " + std::to_string(fs::file_size(e2.path())) + "]";
      }
      std::string ok = fs::exists(root / "data" / "train.bin") ? "" : " NO-TRAIN";
      throw Error(std::string(e.what()) + " LEFT:" + left + ok);
    }
  });
  if (r.status == 77) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(r.status, 1) << r.message;
  EXPECT_NE(r.message.find("'" + (root / "data" / "tokenizer.json").string() + "' not written"),
            std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("No space left on device"), std::string::npos) << r.message;
  const std::string left = r.message.substr(r.message.find(" LEFT:"));
  EXPECT_EQ(left, " LEFT: NO-TRAIN") << "no file, final or temporary, is left";
}

// The same, deterministically: a child is killed right after each step of rewriting set A as set
// B in turn (after staging each file, removing tokenizer.json, each rename).
TEST(PrepareWriteSafety, KilledAfterEachWriteStepLeavesACompleteSetOrNoTokenizer) {
  auto root = testing::scratch_dir();
  const std::string text_a = distinct_characters(300) + std::string(4000, 'a');
  const std::string text_b = distinct_characters(200) + std::string(3000, 'b');
  CharTokenizer tok_a = CharTokenizer::train(text_a), tok_b = CharTokenizer::train(text_b);
  prepare_dataset(text_b, tok_b, (root / "b").string(), 0.1);
  const size_t b_split = split_point(text_b, 0.1);
  auto set_of = [](const fs::path& d) {
    return testing::read_file(d / "train.bin") + "|" + testing::read_file(d / "val.bin") + "|" +
           testing::read_file(d / "tokenizer.json");
  };
  const fs::path dir = root / "data";
  prepare_dataset(text_a, tok_a, dir.string(), 0.1);
  const std::string set_a = set_of(dir), set_b = set_of(root / "b");
  std::vector<std::string> steps;
  prepare_dataset_split(text_b.substr(0, b_split), text_b.substr(b_split), tok_b, (root / "count").string(),
                        [&](const std::string& step) { steps.push_back(step); });
  ASSERT_EQ(steps.size(), 7u);
  int without_tokenizer = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    pid_t pid = ::fork();
    if (pid == 0) {
      size_t calls = 0;
      prepare_dataset_split(std::string_view(text_b).substr(0, b_split), std::string_view(text_b).substr(b_split),
                            tok_b, dir.string(), [&](const std::string&) {
                              if (calls++ == k) ::raise(SIGKILL);
                            });
      ::_exit(0);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    ASSERT_TRUE(WIFSIGNALED(st)) << steps[k];
    expect_complete_or_absent(dir);
    if (fs::exists(dir / "tokenizer.json")) {
      const std::string now = set_of(dir);
      EXPECT_TRUE(now == set_a || now == set_b) << "killed after '" << steps[k] << "': a mixed set";
    } else {
      EXPECT_THROW(load_prepared_dataset(dir.string()), Error) << steps[k];
      ++without_tokenizer;
    }
    prepare_dataset(text_a, tok_a, dir.string(), 0.1);  // back to set A for the next step
    ASSERT_EQ(set_of(dir), set_a);
  }
  EXPECT_EQ(without_tokenizer, 3);  // after the removal and the two shard renames
  expect_no_empty_or_temporary_files(dir);
}

// Two different preparations, A and B, are written into one folder over and over by a child
// process that is killed at a different moment each round. Afterwards every file is absent or
// whole, and when tokenizer.json is there the three files are exactly set A or exactly set B.
TEST(PrepareWriteSafety, KilledAtAnyMomentLeavesACompleteSetOrNoTokenizer) {
  auto root = testing::scratch_dir();
  const std::string text_a = distinct_characters(3000) + std::string(400000, 'a');
  const std::string text_b = distinct_characters(2000) + std::string(300000, 'b');
  CharTokenizer tok_a = CharTokenizer::train(text_a), tok_b = CharTokenizer::train(text_b);
  prepare_dataset(text_a, tok_a, (root / "a").string(), 0.1);
  prepare_dataset(text_b, tok_b, (root / "b").string(), 0.1);
  auto set_of = [](const fs::path& d) {
    return testing::read_file(d / "train.bin") + "|" + testing::read_file(d / "val.bin") + "|" +
           testing::read_file(d / "tokenizer.json");
  };
  const std::string set_a = set_of(root / "a"), set_b = set_of(root / "b");
  const fs::path dir = root / "data";
  int incomplete = 0, complete = 0;
  for (int round = 0; round < 24; ++round) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (int i = 0;; ++i) {
        if (i % 2) {
          prepare_dataset(text_a, tok_a, dir.string(), 0.1);
        } else {
          prepare_dataset(text_b, tok_b, dir.string(), 0.1);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20000 + 3700 * round));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    expect_complete_or_absent(dir);
    if (fs::exists(dir / "tokenizer.json")) {
      const std::string now = set_of(dir);
      EXPECT_TRUE(now == set_a || now == set_b) << "round " << round << ": a mixed set";
      ++complete;
    } else {
      EXPECT_THROW(load_prepared_dataset(dir.string()), Error);
      ++incomplete;
    }
  }
  std::printf("killed %d times with a complete set, %d times mid-preparation\n", complete, incomplete);
  // The next preparation cleans up what the killed writers left.
  prepare_dataset(text_a, tok_a, dir.string(), 0.1);
  EXPECT_EQ(set_of(dir), set_a);
  expect_no_empty_or_temporary_files(dir);
}

}  // namespace
}  // namespace trireme::io

namespace trireme::io {
namespace {

// The single-file writers used outside prepare: a failure names the file and the reason, and the
// file under its final name stays as it was.
TEST(PrepareWriteSafety, TokenizerSaveAndShardWriteFailNamingTheFile) {
  auto dir = testing::scratch_dir();
  CharTokenizer tok = CharTokenizer::train(distinct_characters(3000));
  try {
    tok.save((dir / "missing" / "tokenizer.json").string());
    ADD_FAILURE() << "saved into a missing folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer '" + (dir / "missing" / "tokenizer.json").string() + "' not written"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  testing::write_file(dir / "tokenizer.json", "old");
  testing::write_file(dir / "train.bin", "old");
  ChildResult r = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      tok.save((dir / "tokenizer.json").string());
    } catch (const Error& e) {
      std::vector<int32_t> ids(5000, 1);
      try {
        write_token_shard((dir / "train.bin").string(), ids, tok.vocab_size());
      } catch (const Error& e2) {
        throw Error(std::string(e.what()) + "\n" + e2.what());
      }
    }
  });
  EXPECT_EQ(r.status, 1) << r.message;
  EXPECT_NE(r.message.find("tokenizer '" + (dir / "tokenizer.json").string() + "' not written"), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("token shard '" + (dir / "train.bin").string() + "' not written"), std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("File too large"), std::string::npos) << r.message;
  EXPECT_EQ(testing::read_file(dir / "tokenizer.json"), "old");
  EXPECT_EQ(testing::read_file(dir / "train.bin"), "old");
  expect_no_empty_or_temporary_files(dir);
}

}  // namespace
}  // namespace trireme::io
