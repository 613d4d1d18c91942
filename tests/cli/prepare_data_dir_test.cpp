// `trireme prepare` then `trireme train --set data.dir=...`: training uses the prepared shards as
// they are; a missing, incomplete or inconsistent folder, or data.dir with data.corpus, is refused
// with one line naming data.dir; a full disk or a kill -9 never leaves a partial file.
#include <gtest/gtest.h>

#include "run_command.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace {

namespace fs = std::filesystem;

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("trireme_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two kinds of text in two subfolders, enough for a block of 16 characters in either split.
fs::path corpus_folder(const fs::path& root) {
  for (int i = 0; i < 12; ++i) {
    write(root / "corpus" / "poems" / ("p" + std::to_string(10 + i) + ".txt"),
          "poem " + std::to_string(i) + "\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。\n");
    write(root / "corpus" / "prose" / ("q" + std::to_string(10 + i) + ".txt"),
          "prose " + std::to_string(i) + "\nThe quick brown fox jumps over the lazy dog, twice.\n");
  }
  return root / "corpus";
}

// A tiny model that trains in a moment.
fs::path tiny_config(const fs::path& root) {
  write(root / "tiny.toml", R"([model]
d_model = 16
n_layer = 1
n_head = 2
block_size = 16
[schedule]
warmup_steps = 0
[train]
steps = 2
batch_size = 2
eval_interval = 2
eval_batches = 1
checkpoint_interval = 0
threads = 1
)");
  return root / "tiny.toml";
}

TEST(PrepareDataDir, TrainUsesPreparedShardsWithoutRetokenizing) {
  fs::path root = scratch("datadir");
  fs::path corpus = corpus_folder(root), cfg = tiny_config(root);
  Result p = run("prepare --corpus " + corpus.string() + " -o " + (root / "prepared").string());
  ASSERT_EQ(p.status, 0) << p.out;
  const std::string command = "trireme train --set data.dir=" + (root / "prepared").string();
  EXPECT_NE(p.out.find(command), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("validation: 2 of 24 documents"), std::string::npos) << p.out;

  Result t = run("train --config " + cfg.string() + " --set data.dir=" + (root / "prepared").string() +
                 " --set train.out_dir=" + (root / "run").string());
  ASSERT_EQ(t.status, 0) << t.out;
  EXPECT_FALSE(fs::exists(root / "run" / "data")) << "train tokenized the corpus again";
  EXPECT_NE(t.out.find("from " + (root / "prepared").string()), std::string::npos) << t.out;

  // Training from data.corpus splits the same way as prepare: the same shards, byte for byte.
  Result t2 = run("train --config " + cfg.string() + " --set data.corpus=" + corpus.string() +
                  " --set train.out_dir=" + (root / "run2").string());
  ASSERT_EQ(t2.status, 0) << t2.out;
  for (const char* f : {"train.bin", "val.bin", "tokenizer.json"}) {
    EXPECT_EQ(slurp(root / "run2" / "data" / f), slurp(root / "prepared" / f)) << f;
  }
  fs::remove_all(root);
}

TEST(PrepareDataDir, BadFoldersAreRefusedNamingDataDir) {
  fs::path root = scratch("datadir_bad");
  fs::path corpus = corpus_folder(root), cfg = tiny_config(root);
  const std::string train = "train --config " + cfg.string() + " --set train.out_dir=" + (root / "run").string();

  Result r = run(train + " --set data.dir=" + (root / "nowhere").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("data.dir = \"" + (root / "nowhere").string() + "\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trireme prepare -o"), std::string::npos) << r.out;

  ASSERT_EQ(run("prepare --corpus " + corpus.string() + " -o " + (root / "p").string()).status, 0);
  ASSERT_EQ(run("prepare --corpus " + corpus.string() + " --tokenizer bpe --vocab 300 -o " + (root / "bpe").string()).status, 0);
  fs::copy_file(root / "bpe" / "val.bin", root / "p" / "val.bin", fs::copy_options::overwrite_existing);
  r = run(train + " --set data.dir=" + (root / "p").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("val.bin: vocabulary size 300 does not match the tokenizer's"), std::string::npos) << r.out;

  fs::remove(root / "p" / "tokenizer.json");
  r = run(train + " --set data.dir=" + (root / "p").string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("has no tokenizer.json"), std::string::npos) << r.out;

  r = run(train + " --set data.dir=" + (root / "bpe").string() + " --set data.corpus=" + corpus.string());
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("data.dir: is mutually exclusive with data.corpus"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data.corpus = [\"" + corpus.string() + "\"]"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(root / "run" / "data"));
  fs::remove_all(root);
}

// `trireme prepare` run with a file-size limit (a stand-in for a full disk that works unprivileged):
// exit 1, one line naming tokenizer.json and the reason, no "wrote", no tokenizer.json left.
TEST(PrepareDataDir, WriteFailureExitsNonZeroNamingTheFile) {
  fs::path root = scratch("datadir_full");
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    char32_t c = char32_t(0x4E00 + i);  // 3000 distinct characters: tokenizer.json is the largest file
    text += char(0xE0 | (c >> 12)), text += char(0x80 | ((c >> 6) & 0x3F)), text += char(0x80 | (c & 0x3F));
    if (i % 20 == 19) text += '\n';
  }
  write(root / "book.txt", text);
  const fs::path out = root / "data";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: a write past the limit fails with EFBIG
    rlimit lim{12000, 12000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    std::freopen((root / "log.txt").c_str(), "w", stdout);
    ::dup2(::fileno(stdout), 2);
    ::execl(TRIREME_BINARY, TRIREME_BINARY, "prepare", "--corpus", (root / "book.txt").c_str(), "-o", out.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  const std::string log = slurp(root / "log.txt");
  ASSERT_TRUE(WIFEXITED(st)) << log;
  EXPECT_EQ(WEXITSTATUS(st), 1) << log;
  EXPECT_NE(log.find("'" + (out / "tokenizer.json").string() + "' not written"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_EQ(log.find("wrote"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
  for (const auto& e : fs::directory_iterator(out)) {
    EXPECT_GT(fs::file_size(e.path()), 0u) << e.path();
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  fs::remove_all(root);
}

// SIGKILL `trireme prepare` at different moments while it rewrites a folder prepared before with
// another tokenizer: every file there is whole, and with tokenizer.json present the folder loads.
TEST(PrepareDataDir, KillNineLeavesNoPartialFile) {
  fs::path root = scratch("datadir_kill");
  std::string text;
  for (int i = 0; i < 40000; ++i) text += "line " + std::to_string(i) + ": 春眠不觉晓，处处闻啼鸟。\n";
  write(root / "big.txt", text);
  const fs::path out = root / "data";
  ASSERT_EQ(run("prepare --corpus " + (root / "big.txt").string() + " --tokenizer bpe --vocab 260 -o " + out.string()).status, 0);
  const fs::path cfg = tiny_config(root);
  for (int round = 0; round < 8; ++round) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      ::execl(TRIREME_BINARY, TRIREME_BINARY, "prepare", "--corpus", (root / "big.txt").c_str(), "-o", out.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 40 * round));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    for (const auto& e : fs::directory_iterator(out)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".")) continue;  // a killed writer's temporary, never read
      EXPECT_GT(fs::file_size(e.path()), 0u) << name;
    }
    if (fs::exists(out / "tokenizer.json")) {
      Result t = run("train --config " + cfg.string() + " --set data.dir=" + out.string() + " --set train.steps=1" +
                     " --set train.out_dir=" + (root / "run").string() + " --overwrite");
      EXPECT_EQ(t.status, 0) << "round " << round << ": " << t.out;
    }
  }
  fs::remove_all(root);
}

}  // namespace
