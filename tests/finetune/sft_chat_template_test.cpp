// SFT through a Hugging Face chat template (io/sft_chat.h, train/sft_chat_template.h): the loss
// mask covers exactly the assistant's last message as the template renders it, the template's
// own end-of-turn token is not doubled, a template that cannot be split is refused naming the
// line, finetune.chat_template is validated and found (tokenizer_config.json, file:PATH), and a
// run saves its template in checkpoints so a resume renders the same examples.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tiny_trainer_config.h"
#include "trireme/io/config.h"
#include "trireme/io/file_write.h"
#include "trireme/io/sft.h"
#include "trireme/io/sft_chat.h"
#include "trireme/io/tokenizer.h"
#include "trireme/io/tokenizer_char.h"
#include "trireme/train/sft_chat_template.h"
#include "trireme/train/trainer.h"

namespace fs = std::filesystem;
using namespace trireme;
using Json = nlohmann::ordered_json;

namespace {

const std::string kQwen2 = std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/qwen2";

// Qwen2-Instruct's template (ChatML with a default system message).
const std::string kChatMl =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::unique_ptr<io::Tokenizer> qwen2_tokenizer() {
  return io::tokenizer_from_json(nlohmann::json::parse(io::read_file(kQwen2 + "/tokenizer.json")));
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const io::ConfigError& e) {
    return e.what();
  }
  return "";
}

io::SftExample conversation(const char* json, int64_t line) {
  io::SftExample ex = io::parse_sft_line(json, "x");
  ex.line = line;
  return ex;
}

}  // namespace

TEST(SftChatTemplate, LossMaskCoversExactlyTheAssistantsRenderedTokens) {
  const auto tok = qwen2_tokenizer();
  std::vector<io::SftExample> ex = {
      conversation(R"({"messages": [{"role": "user", "content": "床前明月光"}, {"role": "assistant", "content": "疑是地上霜"}]})", 1),
      // A prompt/response pair is the conversation [user, assistant].
      io::SftExample{"hello", "world", 2, {}, false},
  };
  io::apply_chat_template(ex, io::ChatTemplate(kChatMl, "chatml"), {"", "<|im_end|>"}, "data.jsonl");
  const std::string system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n";
  EXPECT_EQ(ex[0].prompt, system + "<|im_start|>user\n床前明月光<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ex[0].response, "疑是地上霜<|im_end|>\n");
  EXPECT_EQ(ex[1].prompt, system + "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ex[1].response, "world<|im_end|>\n");
  EXPECT_TRUE(ex[0].ends_turn && ex[1].ends_turn);

  const io::PackedSequences p = io::pack_sft(ex, *tok, io::kChatTemplateText, /*block_size=*/255, /*pack=*/false);
  ASSERT_EQ(p.sequences, 2);
  const size_t L = 256;
  for (size_t s = 0; s < 2; ++s) {
    const auto prompt_ids = tok->encode(ex[s].prompt), response_ids = tok->encode(ex[s].response);
    const std::vector<int32_t> seq(p.tokens.begin() + long(s * L), p.tokens.begin() + long((s + 1) * L));
    const std::vector<uint8_t> mask(p.loss_mask.begin() + long(s * L), p.loss_mask.begin() + long((s + 1) * L));
    std::vector<int32_t> counted, not_counted;
    for (size_t i = 0; i < prompt_ids.size() + response_ids.size(); ++i) (mask[i] ? counted : not_counted).push_back(seq[i]);
    // Exactly the response's tokens count: "疑是地上霜<|im_end|>\n", nothing appended after the
    // template's <|im_end|> (no <|endoftext|>), and the prompt and the padding do not.
    EXPECT_EQ(counted, response_ids) << "example " << s;
    EXPECT_EQ(not_counted, prompt_ids) << "example " << s;
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), long(response_ids.size())) << "example " << s;
    EXPECT_EQ(std::count(seq.begin(), seq.begin() + long(prompt_ids.size() + response_ids.size()), 0), 0)
        << "an <|endoftext|> was appended to example " << s;
    EXPECT_EQ(tok->token_to_string(response_ids[response_ids.size() - 2]), "<|im_end|>");
  }
  EXPECT_EQ(p.response_tokens, long(tok->encode(ex[0].response).size() + tok->encode(ex[1].response).size()));
}

TEST(SftChatTemplate, AResponseThatDoesNotEndTheTurnGetsTheEndToken) {
  // Ids: 0 <unk>, then "\n" 1, ":" 2, "a" 3, "b" 4, "q" 5.
  const io::CharTokenizer tok = io::CharTokenizer::train("\n:abq");
  std::vector<io::SftExample> ex = {io::SftExample{"q", "ab", 1, {}, false}};
  io::apply_chat_template(ex, io::ChatTemplate("{% for m in messages %}{{ m.content }}:{% endfor %}", "t"), {}, "f");
  EXPECT_EQ(ex[0].prompt, "q:");
  EXPECT_EQ(ex[0].response, "ab:");
  EXPECT_FALSE(ex[0].ends_turn);
  const io::PackedSequences p = io::pack_sft(ex, tok, io::kChatTemplateText, 6, false);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{5, 2, 3, 4, 2, 1, 1}));  // the end token "\n" after the response
  EXPECT_EQ(p.loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0}));
}

TEST(SftChatTemplate, TemplatesThatCannotBeSplitOrRaiseAreRefusedNamingTheLine) {
  // Mistral v0.3 puts the system message into the last user turn: with the assistant's answer
  // after it, that turn is no longer the last one, so the prompt is not a prefix of the whole.
  const std::string mistral =
      "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
      "{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}"
      "{{- bos_token }}{%- for message in loop_messages %}{%- if message['role'] == 'user' %}"
      "{%- if loop.last and system_message is defined %}{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + "
      "'[/INST]' }}{%- else %}{{- '[INST] ' + message['content'] + '[/INST]' }}{%- endif %}"
      "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content']|trim + eos_token}}"
      "{%- else %}{{- raise_exception('Only user and assistant roles are supported!') }}{%- endif %}{%- endfor %}";
  const io::ChatTemplate t(mistral, "mistral.jinja");
  std::vector<io::SftExample> split = {conversation(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})",
      7)};
  const std::string e = error_of([&] { io::apply_chat_template(split, t, {"<s>", "</s>"}, "train.jsonl"); });
  EXPECT_NE(e.find("train.jsonl line 7: the chat template (mistral.jinja) cannot be split into prompt and response"),
            std::string::npos)
      << e;
  // Without the system message it splits, and the template's </s> is not doubled.
  std::vector<io::SftExample> ok = {conversation(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello "}]})", 1)};
  io::apply_chat_template(ok, t, {"<s>", "</s>"}, "train.jsonl");
  EXPECT_EQ(ok[0].prompt, "<s>[INST] Hi[/INST]");
  EXPECT_EQ(ok[0].response, " Hello</s>");
  EXPECT_TRUE(ok[0].ends_turn);
  // raise_exception's message reaches the user with the line it came from.
  std::vector<io::SftExample> tool = {conversation(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]})",
      3)};
  const std::string r = error_of([&] { io::apply_chat_template(tool, t, {"<s>", "</s>"}, "train.jsonl"); });
  EXPECT_NE(r.find("train.jsonl line 3: mistral.jinja line 1 column"), std::string::npos) << r;
  EXPECT_NE(r.find("the template raised an error: Only user and assistant roles are supported!"), std::string::npos) << r;
}

TEST(SftChatTemplate, ConfigKeyIsCheckedBeforeAnyDataIsRead) {
  const std::vector<std::string> sft = {"finetune.task=sft", "finetune.train_file=x.jsonl"};
  auto parse = [&](std::vector<std::string> extra, bool with_sft = true) {
    std::vector<std::string> o = with_sft ? sft : std::vector<std::string>{};
    o.insert(o.end(), extra.begin(), extra.end());
    return error_of([&] { io::Config::parse("", "t", o); });
  };
  EXPECT_EQ(parse({"finetune.chat_template=tokenizer"}), "");
  EXPECT_EQ(parse({"finetune.chat_template=file:chat.jinja"}), "");
  EXPECT_EQ(parse({"finetune.chat_template={{ messages[0].content }}"}), "");
  EXPECT_NE(parse({"finetune.chat_template=tokenizer_config.json"}).find("finetune.chat_template: expected \"tokenizer\""),
            std::string::npos);
  EXPECT_NE(parse({"finetune.chat_template={% for m in messages %}"}).find(
                "finetune.chat_template line 1 column 1: '{% for %}' is not closed"),
            std::string::npos)
      << parse({"finetune.chat_template={% for m in messages %}"});
  EXPECT_NE(parse({"finetune.chat_template=tokenizer"}, false).find("is read by finetune.task = \"sft\" only"),
            std::string::npos);
  EXPECT_NE(parse({"finetune.chat_template=tokenizer", "finetune.template={prompt}: {response}"})
                .find("finetune.template: a text template and finetune.chat_template"),
            std::string::npos);
}

TEST(SftChatTemplate, FoundBesideTheModelsTokenizerOrInAFile) {
  const fs::path dir = temp_path("sft_chat_source");
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kQwen2 + "/tokenizer.json", dir / "tokenizer.json");
  const auto tok = qwen2_tokenizer();
  auto load = [&](const std::string& source) {
    io::TrainConfig cfg;
    cfg.finetune.chat_template = source;
    return train::load_sft_chat_template(cfg, dir.string(), *tok);
  };
  EXPECT_FALSE(load("").has_value());
  // No tokenizer_config.json: the error names where it looked and what to do.
  const std::string missing = error_of([&] { load("tokenizer"); });
  EXPECT_NE(missing.find("finetune.chat_template = \"tokenizer\": no tokenizer_config.json with the chat template: "
                         "looked for '" + (dir / "tokenizer_config.json").string() + "'"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("file:PATH"), std::string::npos);
  // One without a chat_template.
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|im_end|>"})";
  EXPECT_NE(error_of([&] { load("tokenizer"); }).find("tokenizer_config.json' has no \"chat_template\""), std::string::npos);
  // The real thing: the template and the special tokens (a string or an AddedToken object).
  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"chat_template", kChatMl}, {"bos_token", nullptr}, {"eos_token", {{"content", "<|im_end|>"}}}}.dump();
  auto t = load("tokenizer");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->text, kChatMl);
  EXPECT_EQ(t->tokens.bos, "");
  EXPECT_EQ(t->tokens.eos, "<|im_end|>");
  EXPECT_EQ(t->origin, (dir / "tokenizer_config.json").string());
  // file:PATH, a Jinja file; the tokens still come from the folder's tokenizer_config.json.
  std::ofstream(dir / "chat.jinja") << "{{ messages[0].content }}";
  t = load("file:" + (dir / "chat.jinja").string());
  EXPECT_EQ(t->text, "{{ messages[0].content }}");
  EXPECT_EQ(t->tokens.eos, "<|im_end|>");
  EXPECT_NE(error_of([&] { load("file:" + (dir / "none.jinja").string()); }).find("no file '"), std::string::npos);
  // Without a tokenizer_config.json, eos_token is the tokenizer's end-of-text token.
  fs::remove(dir / "tokenizer_config.json");
  EXPECT_EQ(load("{{ eos_token }}")->tokens.eos, "<|endoftext|>");
  fs::remove_all(dir);
}

TEST(SftChatTemplate, ARunSavesItsTemplateAndResumesWithItExactly) {
  // A Qwen2 folder with its tokenizer_config.json; the run starts from it, the resume from the
  // run's own checkpoint (which has no tokenizer_config.json beside it).
  const std::string root = trireme::testing::fresh_run_dir("sft_chat_run");
  const fs::path model = fs::path(root) / "qwen2";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) fs::copy_file(kQwen2 + "/" + f, model / f);
  // ChatML without the default system message, so an example fits a sequence of the tiny model.
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
      "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  std::ofstream(model / "tokenizer_config.json") << Json{{"chat_template", chatml}, {"eos_token", "<|im_end|>"}}.dump();
  std::string lines;
  const char* words[] = {"hello", "world", "the moon", "frost", "home", "light"};
  for (int i = 0; i < 24; ++i)
    lines += Json{{"messages", {{{"role", "user"}, {"content", words[i % 6]}}, {{"role", "assistant"}, {"content", words[(i + 1) % 6]}}}}}.dump() + "\n";
  const std::string data = root + "/sft.jsonl";
  io::write_file(data, lines);
  auto cfg = [&](const std::string& out) {
    return io::Config::parse(std::string(trireme::testing::kQwen2FixtureModel) + R"(
[finetune]
task = "sft"
chat_template = "tokenizer"
[optim]
lr = 1e-2
[schedule]
kind = "constant"
warmup_steps = 0
[train]
steps = 6
batch_size = 4
eval_interval = 6
eval_batches = 1
checkpoint_interval = 3
threads = 1
)", "test", {"train.out_dir=" + out, "finetune.train_file=" + data});
  };
  const auto whole = train::Trainer(cfg(root + "/whole"), {.quiet = true, .init_from = model.string()}).run();
  train::Trainer(cfg(root + "/parts"), {.quiet = true, .stop_after = 3, .init_from = model.string()}).run();
  const auto state = nlohmann::json::parse(io::read_file(fs::path(root) / "parts" / "checkpoints" / "step_00000003" / "state.json"));
  ASSERT_TRUE(state.contains("chat_template")) << state.dump().substr(0, 300);
  EXPECT_EQ(state["chat_template"]["template"], chatml);
  EXPECT_EQ(state["chat_template"]["eos_token"], "<|im_end|>");
  const auto rest = train::Trainer(cfg(root + "/parts"), {.resume = true, .quiet = true}).run();
  ASSERT_EQ(rest.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest.losses[i], whole.losses[i + 3]);
  EXPECT_GT(whole.losses.front(), 1.0);  // responses are counted: not the 0 of a run with nothing to learn
  fs::remove_all(root);
}

TEST(SftChatTemplate, DeeplyNestedLinesAreRefusedNotRecursedInto) {
  // A conversation is copied and walked by the template; nesting is bounded where it is read.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string line = R"({"messages": [{"role": "user", "content": "q", "extra": )" + deep +
                           R"(}, {"role": "assistant", "content": "a"}]})";
  const std::string e = error_of([&] { io::parse_sft_line(line, "f line 2"); });
  EXPECT_NE(e.find("f line 2: JSON nested more than 64 deep"), std::string::npos) << e.substr(0, 200);
  EXPECT_NO_THROW(io::parse_sft_line(
      R"({"messages": [{"role": "user", "content": "q", "extra": [[[1]]]}, {"role": "assistant", "content": "a"}]})", "f"));
}
