// `trireme eval` and `trireme generate` as a user meets them: defaults in --help, top-p and several
// samples, an empty prompt, a checkpoint without its optimizer state, and clear refusals (exit 2)
// of invalid UTF-8, unknown characters and texts that cannot be scored.
#include <gtest/gtest.h>

#include "run_command.h"
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tiny_trainer_config.h"
#include "trireme/train/trainer.h"

namespace fs = std::filesystem;

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

const char* kPoem = "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。\n";

// One tiny trained run for the whole file: its folder holds the checkpoint and the text files.
class EvalGenerate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(trireme::testing::fresh_run_dir("eval_generate_cli"));
    fs::create_directories(*dir_);
    std::string corpus;
    for (int i = 0; i < 40; ++i) corpus += kPoem;
    write("corpus.txt", corpus);
    trireme::io::Config cfg = trireme::testing::tiny_trainer_config(
        *dir_ + "/run", 6, 0.0, {"data.corpus=" + *dir_ + "/corpus.txt", "train.eval_interval=0"});
    trireme::train::Trainer(cfg, {.quiet = true}).run();
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string write(const std::string& name, const std::string& text) {
    const std::string p = *dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  static std::string run_dir() { return *dir_ + "/run"; }
  static std::string* dir_;
};
std::string* EvalGenerate::dir_ = nullptr;

TEST_F(EvalGenerate, HelpShowsTheDefaults) {
  const Result h = run("generate --help");
  EXPECT_EQ(h.status, 0);
  for (const char* flag : {"--top-p", "--num-samples", "--prompt-file", "=100", "(0, 1]=1", "=cpu"}) {
    EXPECT_NE(h.out.find(flag), std::string::npos) << flag << " in " << h.out;
  }
  EXPECT_EQ(run("eval --help").status, 0);
}

TEST_F(EvalGenerate, GenerateNeedsNoOptimizerState) {
  for (const auto& e : fs::recursive_directory_iterator(run_dir() + "/checkpoints")) {
    if (e.path().filename() == "optimizer.safetensors") fs::remove(e.path());
  }
  const Result r = run("generate --checkpoint " + run_dir() + " --prompt 明月 -n 5 --top-p 0.9 --num-samples 2 --seed 3");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "=== sample "), 2) << r.out;
  EXPECT_EQ(count(r.out, "明月"), 2) << r.out;
  const Result empty = run("generate --checkpoint " + run_dir() + " --prompt '' -n 5");
  EXPECT_EQ(empty.status, 0) << empty.out;
  const Result file = run("generate --checkpoint " + run_dir() + " --prompt-file " + write("prompt.txt", "白日") + " -n 3");
  EXPECT_EQ(file.status, 0) << file.out;
  EXPECT_EQ(file.out.rfind("白日", 0), 0u) << file.out;
}

TEST_F(EvalGenerate, StaticModeWritesWhatEagerWrites) {
  const std::string args = "generate --checkpoint " + run_dir() + " --prompt 明月 -n 24 -t 0.8 --seed 5";
  const Result eager = run(args), replayed = run(args + " --mode static");
  EXPECT_EQ(replayed.status, 0) << replayed.out;
  EXPECT_EQ(replayed.out, eager.out);
  EXPECT_EQ(run(args + " --mode graph").status, 2) << "only eager and static";
}

TEST_F(EvalGenerate, BadPromptsAreRefusedWithExit2) {
  const Result bad = run("generate --checkpoint " + run_dir() + " --prompt-file " + write("bad.txt", "明\xff月"));
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("not valid UTF-8"), std::string::npos) << bad.out;
  const Result unknown = run("generate --checkpoint " + run_dir() + " --prompt 明月Q");
  EXPECT_EQ(unknown.status, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("'Q' (U+0051)"), std::string::npos) << unknown.out;
  EXPECT_EQ(run("generate --checkpoint " + run_dir() + " --prompt x --prompt-file " + write("p.txt", "x")).status, 2);
  EXPECT_EQ(run("generate --checkpoint " + run_dir() + " --top-p 0").status, 2);
}

TEST_F(EvalGenerate, EvalPrintsPerTokenAndPerCharacter) {
  const Result r = run("eval --checkpoint " + run_dir() + " --text " + write("poem.txt", kPoem));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("per token:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("per character:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bits"), std::string::npos) << r.out;
  EXPECT_EQ(run("eval --checkpoint " + run_dir() + " --text " + write("poem2.txt", kPoem) + " --stride 4").status, 0);
}

TEST_F(EvalGenerate, EvalRefusesWhatItCannotScore) {
  Result r = run("eval --checkpoint " + run_dir() + " --text " + write("empty.txt", ""));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("is empty"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + run_dir() + " --text " + write("one.txt", "床"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("at least 2 tokens"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + run_dir() + " --text /nonexistent/text.txt");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/text.txt"), std::string::npos) << r.out;
  r = run("eval --checkpoint " + run_dir() + " --text " + write("poem3.txt", kPoem) + " --stride 1000");
  EXPECT_EQ(r.status, 2) << r.out;
  r = run("eval --checkpoint /nonexistent --text " + write("poem4.txt", kPoem));
  EXPECT_NE(r.status, 0) << r.out;
}

}  // namespace
