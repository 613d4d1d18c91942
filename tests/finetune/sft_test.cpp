// Supervised fine-tuning data: the loss of a packed batch is the mean over the response tokens
// only (against a hand computation), packing puts whole examples into block_size + 1 sequences
// with padding that does not count, prompt/response and messages lines are read and malformed
// lines are refused naming the file and the line (or skipped and counted).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tiny_trainer_config.h"
#include "trireme/autograd/grad_mode.h"
#include "trireme/io/config.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/sft.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/train/trainer.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

// Ids: 0 <unk>, then in code point order "\n" 1, ">" 2, "a" 3, "b" 4, "c" 5, "x" 6, "y" 7.
io::CharTokenizer tokenizer() { return io::CharTokenizer::train("\nabcxy>"); }

std::string write(const std::string& name, const std::string& text) { return trireme::testing::write_temp_file(name, text); }

}  // namespace

TEST(SftPacking, WholeExamplesPerSequenceWithTheResponseMasked) {
  const io::CharTokenizer tok = tokenizer();
  // "a>" + "xy" + end "\n": 5 tokens, the last 3 count.
  const std::vector<io::SftExample> ex = {{"a", "xy"}, {"b", "y"}, {"c", "xyxy"}};
  const io::PackedSequences p = io::pack_sft(ex, tok, "{prompt}>{response}", /*block_size=*/8, /*pack=*/true);
  // Sequence 1: "a>xy\n" (5) + "b>y\n" (4) = 9 = block_size + 1. Sequence 2: "c>xyxy\n" (7) + 2 padding.
  ASSERT_EQ(p.sequences, 2);
  ASSERT_EQ(p.tokens.size(), 18u);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{3, 2, 6, 7, 1, 4, 2, 7, 1, 5, 2, 6, 7, 6, 7, 1, 1, 1}));
  EXPECT_EQ(p.loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(p.response_tokens, 3 + 2 + 5);
  EXPECT_EQ(p.truncated, 0);
  // Unpacked: one example per sequence, padded; a longer one is cut to the sequence and counted.
  const io::PackedSequences u = io::pack_sft(ex, tok, "{prompt}>{response}", 8, /*pack=*/false);
  EXPECT_EQ(u.sequences, 3);
  EXPECT_EQ(u.tokens.size(), 27u);
  EXPECT_EQ(std::vector<uint8_t>(u.loss_mask.begin() + 9, u.loss_mask.begin() + 18),
            (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(u.truncated, 0);
  EXPECT_EQ(io::pack_sft(ex, tok, "{prompt}>{response}", 5, false).truncated, 1);
}

TEST(SftPacking, LossIsTheMeanOverResponseTokensOnly) {
  const io::CharTokenizer tok = tokenizer();
  const std::vector<io::SftExample> ex = {{"a", "xy"}, {"b", "y"}, {"c", "xyxy"}, {"ab", "yx"}};
  const io::PackedSequences p = io::pack_sft(ex, tok, "{prompt}>{response}", 8, true);
  io::DataLoader loader(p.tokens, p.loss_mask, 8, /*seed=*/3);
  ASSERT_EQ(loader.num_windows(), p.sequences);
  const io::Batch b = loader.samples(0, p.sequences);
  models::GPT gpt({.vocab_size = tok.vocab_size(), .block_size = 8, .n_layer = 1, .n_head = 2, .d_model = 8}, 5);
  NoGradGuard no_grad;
  const double got = gpt.loss(b.inputs, b.targets).item();
  // By hand: -log softmax(logits)[target] averaged over the targets whose mask is 1.
  const Tensor logits = contiguous(gpt.forward(b.inputs));
  const auto l = logits.to_vector<float>();
  const auto x = b.inputs.to_vector<int64_t>(), y = b.targets.to_vector<int64_t>();
  const int64_t V = tok.vocab_size(), rows = int64_t(x.size());
  double sum = 0;
  int64_t counted = 0, expected_counted = 0;
  for (int64_t i = 0; i < rows; ++i) {
    // The row's sequence and position: what the mask says about its target.
    const int64_t seq = i / 8, t = i % 8;
    const int64_t start = loader.sample_start(seq);
    expected_counted += p.loss_mask[size_t(start + t + 1)];
    EXPECT_EQ(y[size_t(i)] == -100, p.loss_mask[size_t(start + t + 1)] == 0) << "row " << i;
    if (y[size_t(i)] == -100) continue;
    double mx = -1e30, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(l[size_t(i * V + v)]));
    for (int64_t v = 0; v < V; ++v) z += std::exp(double(l[size_t(i * V + v)]) - mx);
    sum += -(double(l[size_t(i * V + y[size_t(i)])]) - mx - std::log(z));
    ++counted;
  }
  EXPECT_EQ(counted, expected_counted);
  EXPECT_EQ(counted, p.response_tokens);
  EXPECT_NEAR(got, sum / double(counted), 1e-5);
}

TEST(SftFile, ReadsPairsAndConversations) {
  const std::string path = write("sft_ok.jsonl",
                                 "{\"prompt\": \"床前\", \"response\": \"明月光\"}\n"
                                 "\n"
                                 "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                                 "\"content\": \"r\"}]}\n"
                                 "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
                                 "\"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"r\"}]}\n");
  const io::SftFile f = io::read_sft_file(path, false);
  ASSERT_EQ(f.examples.size(), 3u);
  EXPECT_EQ(f.examples[0].prompt, "床前");
  EXPECT_EQ(f.examples[0].response, "明月光");
  EXPECT_EQ(f.examples[1].prompt, "q");
  EXPECT_EQ(f.examples[1].line, 3);
  EXPECT_EQ(f.examples[2].prompt, "system: s\nuser: q");
  EXPECT_EQ(f.examples[2].response, "r");
  fs::remove(path);
}

TEST(SftFile, MalformedLinesAreNamedOrSkippedAndCounted) {
  const std::string path = write("sft_bad.jsonl",
                                 "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                                 "{\"prompt\": \"a\", \"response\": \"b\"}\n"
                                 "{\"prompt\": \"a\"\n"
                                 "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"user\", "
                                 "\"content\": \"r\"}]}\n");
  try {
    io::read_sft_file(path, false);
    FAIL() << "expected a refusal";
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + " line 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("finetune.bad_lines"), std::string::npos) << e.what();
  }
  const io::SftFile f = io::read_sft_file(path, true);
  EXPECT_EQ(f.examples.size(), 2u);
  EXPECT_EQ(f.skipped, 2);
  try {
    io::parse_sft_line("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"user\", \"content\": \"r\"}]}",
                       "f line 4");
    FAIL();
  } catch (const io::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must be the assistant's"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(SftConfig, TemplateMustHoldPromptThenResponseAtTheEnd) {
  EXPECT_NO_THROW(io::Config::parse("", "t", {"finetune.template=Q: {prompt}\\nA: {response}"}));
  EXPECT_THROW(io::Config::parse("", "t", {"finetune.template={response}{prompt}"}), io::ConfigError);
  EXPECT_THROW(io::Config::parse("", "t", {"finetune.template={prompt} {response}!"}), io::ConfigError);
  // sft needs its file.
  EXPECT_THROW(io::Config::parse("", "t", {"finetune.task=sft"}), io::ConfigError);
}

TEST(SftTraining, TrainsFromABaseAndResumesExactly) {
  const std::string root = trireme::testing::fresh_run_dir("sft_training");
  fs::create_directories(root);
  train::Trainer(trireme::testing::tiny_trainer_config(root + "/base", 6, 0.0), {.quiet = true}).run();
  std::string lines;
  for (int i = 0; i < 40; ++i)
    lines += "{\"prompt\": \"静夜思\\n\", \"response\": \"床前明月光\"}\n";
  const std::string data = write("sft_poems.jsonl", lines);
  auto cfg = [&](const std::string& out) {
    return trireme::testing::tiny_trainer_config(out, 8, 0.1,
                                                 {"finetune.task=sft", "finetune.train_file=" + data,
                                                  "finetune.template={prompt}{response}", "lora.rank=2"});
  };
  const auto whole = train::Trainer(cfg(root + "/whole"), {.quiet = true, .init_from = root + "/base"}).run();
  train::Trainer(cfg(root + "/parts"), {.quiet = true, .stop_after = 3, .init_from = root + "/base"}).run();
  const auto rest = train::Trainer(cfg(root + "/parts"), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(rest.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rest.losses[i], whole.losses[i + 3]);
  EXPECT_LT(whole.final_loss, whole.first_loss);
  fs::remove_all(root);
  fs::remove(data);
}
