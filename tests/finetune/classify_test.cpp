// Sequence classification: accuracy and macro-F1 of a hand-made confusion; JSONL and CSV
// examples (quotes, header) and malformed lines named by file and line; a label outside the label
// set refused naming the line; a classifier run writes its validation metrics and resumes to the
// uninterrupted run's losses; the poem tasks read title, poet and dynasty off the poems.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tiny_trainer_config.h"
#include "trireme/io/labeled_text.h"
#include "trireme/io/poem_tasks.h"
#include "trireme/train/classification_metrics.h"
#include "trireme/train/trained_model.h"
#include "trireme/train/trainer.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

std::string write(const std::string& name, const std::string& text) { return trireme::testing::write_temp_file(name, text); }

}  // namespace

TEST(ClassificationMetrics, HandMadeConfusion) {
  // Labels 0, 1, 2 (3 never occurs, so it is left out of the macro average).
  // truth:     0 0 0 0 1 1 1 2 2 2
  // predicted: 0 0 1 2 1 1 0 2 2 2
  // label 0: tp 2, fp 1, fn 2 -> F1 4/7; label 1: tp 2, fp 1, fn 1 -> 4/6; label 2: tp 3, fp 1, fn 0 -> 6/7.
  const std::vector<int> truth{0, 0, 0, 0, 1, 1, 1, 2, 2, 2}, pred{0, 0, 1, 2, 1, 1, 0, 2, 2, 2};
  const auto m = train::classification_metrics(truth, pred, 4);
  EXPECT_DOUBLE_EQ(m.accuracy, 0.7);
  EXPECT_NEAR(m.macro_f1, (4.0 / 7 + 4.0 / 6 + 6.0 / 7) / 3, 1e-12);
  // A label never predicted counts with F1 0.
  const auto all_zero = train::classification_metrics({0, 1, 1}, {0, 0, 0}, 2);
  EXPECT_NEAR(all_zero.macro_f1, (2.0 / 4 + 0.0) / 2, 1e-12);  // label 0: tp 1, fp 2
}

TEST(LabeledText, JsonlAndCsvWithQuotesAndHeader) {
  const std::string jsonl = write("a.jsonl", "{\"text\": \"床前明月光\", \"label\": \"唐\"}\n\n{\"text\": \"x\", \"label\": 3}\n");
  const auto j = io::read_labeled_file(jsonl, false);
  ASSERT_EQ(j.examples.size(), 2u);
  EXPECT_EQ(j.examples[1].label, "3");
  EXPECT_EQ(j.examples[1].line, 3);
  const std::string csv = write("a.csv", "text,label\n\"a, \"\"quoted\"\" text\",pos\nplain,neg\n");
  const auto c = io::read_labeled_file(csv, false);
  ASSERT_EQ(c.examples.size(), 2u);
  EXPECT_EQ(c.examples[0].text, "a, \"quoted\" text");
  EXPECT_EQ(c.examples[0].label, "pos");
  EXPECT_EQ(c.examples[1].line, 3);
  fs::remove(jsonl);
  fs::remove(csv);
}

TEST(LabeledText, MalformedLinesAreNamedOrSkipped) {
  const std::string csv = write("bad.csv", "one,a\ntwo,b,c\n\"three,c\nfour,d\n");
  try {
    io::read_labeled_file(csv, false);
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(csv + " line 2: expected 2 fields"), std::string::npos) << e.what();
  }
  const auto f = io::read_labeled_file(csv, true);
  EXPECT_EQ(f.examples.size(), 2u);
  EXPECT_EQ(f.skipped, 2);
  const std::string jsonl = write("bad.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\"}\n");
  try {
    io::read_labeled_file(jsonl, false);
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(jsonl + " line 2"), std::string::npos) << e.what();
  }
  fs::remove(csv);
  fs::remove(jsonl);
}

TEST(PoemTasks, TitlePoetAndDynastyOfBothFiles) {
  const io::Poem tang = io::parse_poem({"/x/tang300", "《静夜思》\n作者：李白\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。"});
  EXPECT_EQ(tang.title, "静夜思");
  EXPECT_EQ(tang.poet, "李白");
  EXPECT_EQ(tang.dynasty, "唐");
  EXPECT_EQ(tang.body, "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。");
  const io::Poem song = io::parse_poem({"/x/song100", "题目:《塞上》\n作者:柳开（９４６－９９９）\n鸣骹直上一千尺，天静无风声更干。"});
  EXPECT_EQ(song.title, "塞上");
  EXPECT_EQ(song.poet, "柳开");
  EXPECT_EQ(song.dynasty, "宋");
}

class Classifier : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = trireme::testing::fresh_run_dir("classifier");
    fs::create_directories(root_);
    train::Trainer(trireme::testing::tiny_trainer_config(root_ + "/base", 6, 0.0), {.quiet = true}).run();
    std::string train, val;
    for (int i = 0; i < 24; ++i) {
      train += i % 3 ? "{\"text\": \"床前明月光\", \"label\": \"唐\"}\n" : "{\"text\": \"天静无风声\", \"label\": \"宋\"}\n";
      if (i < 6) val += i % 2 ? "{\"text\": \"明月光\", \"label\": \"唐\"}\n" : "{\"text\": \"无风声\", \"label\": \"宋\"}\n";
    }
    train_ = write("cls.train.jsonl", train);
    val_ = write("cls.val.jsonl", val);
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove(train_);
    fs::remove(val_);
  }
  io::Config config(const std::string& out, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> keys = {"finetune.task=classify", "finetune.train_file=" + train_,
                                     "finetune.val_file=" + val_, "train.eval_interval=4", "optim.lr=0.01"};
    keys.insert(keys.end(), extra.begin(), extra.end());
    return trireme::testing::tiny_trainer_config(out, 8, 0.1, keys);
  }
  std::string root_, train_, val_;
};

TEST_F(Classifier, WritesValidationMetricsAndResumesExactly) {
  const auto whole = train::Trainer(config(root_ + "/whole"), {.quiet = true, .init_from = root_ + "/base"}).run();
  ASSERT_EQ(whole.losses.size(), 8u);
  EXPECT_DOUBLE_EQ(whole.majority_accuracy, 0.5);  // 唐 is the training majority; half of val
  EXPECT_EQ(whole.labels, (std::vector<std::string>{"唐", "宋"}));  // sorted (UTF-8 byte order)
  std::ifstream m(whole.metrics_path);
  int evaluations = 0;
  for (std::string line; std::getline(m, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("val_accuracy")) continue;
    ++evaluations;
    EXPECT_GE(j["val_accuracy"].get<double>(), 0.0);
    EXPECT_TRUE(j.contains("val_macro_f1"));
  }
  EXPECT_EQ(evaluations, 2);
  train::Trainer(config(root_ + "/parts"), {.quiet = true, .stop_after = 3, .init_from = root_ + "/base"}).run();
  const auto rest = train::Trainer(config(root_ + "/parts"), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(rest.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rest.losses[i], whole.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(rest.val_accuracy, whole.val_accuracy);
  // generate and eval refuse a classifier's checkpoint, saying what it is.
  try {
    train::load_trained_model(whole.checkpoint_path, Device::cpu(), "generate");
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence classifier"), std::string::npos) << e.what();
  }
}

TEST_F(Classifier, LabelOutsideTheSetIsRefusedNamingTheLine) {
  try {
    train::Trainer(config(root_ + "/labels", {"finetune.labels=[\"唐\", \"元\"]"}),
                   {.quiet = true, .init_from = root_ + "/base"});
    FAIL() << "expected a refusal";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(train_ + " line 1: label \"宋\" is not in the label set"), std::string::npos)
        << e.what();
  }
}
