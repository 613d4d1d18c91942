// A Hugging Face folder's chat template survives the trip through trireme: `import hf` keeps it
// (chat_template.jinja, or tokenizer_config.json's "chat_template", with its bos/eos tokens) in
// the checkpoint, where SFT's finetune.chat_template = "tokenizer" finds it, and `export hf`
// writes it into tokenizer_config.json, where transformers' apply_chat_template reads it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hf_fixtures.h"
#include "trireme/io/config.h"
#include "trireme/io/tokenizer.h"
#include "trireme/train/hf_checkpoint.h"
#include "trireme/train/sft_chat_template.h"

namespace fs = std::filesystem;
using namespace trireme;

namespace {

const char* kTemplate =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// The committed Qwen2 fixture folder, copied, with `extra` files beside it.
fs::path qwen2_folder_with(const fs::path& root, const std::vector<std::pair<std::string, std::string>>& extra) {
  const fs::path dir = root / "qwen2";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    fs::copy_file(test::hf_fixture(std::string("qwen2/") + f), dir / f);
  for (const auto& [name, text] : extra) std::ofstream(dir / name) << text;
  return dir;
}

std::string latest_state(const fs::path& run) {
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path().filename().string().rfind("step_", 0) == 0) return (e.path() / "state.json").string();
  return "";
}

}  // namespace

TEST(HfChatTemplate, TokenizerConfigTemplateIsImportedUsedBySftAndExported) {
  const fs::path root = test::fresh_test_dir("hf_chat_");
  const nlohmann::json tokenizer_config = {{"chat_template", kTemplate}, {"eos_token", "<|im_end|>"}, {"bos_token", nullptr}};
  const fs::path hf = qwen2_folder_with(root, {{"tokenizer_config.json", tokenizer_config.dump()}});
  train::import_hf(hf, root / "run");
  const nlohmann::json state = test::read_json(latest_state(root / "run"));
  ASSERT_TRUE(state.contains("chat_template"));
  EXPECT_EQ(state["chat_template"]["template"], kTemplate);
  EXPECT_EQ(state["chat_template"]["eos_token"], "<|im_end|>");

  // SFT from the imported checkpoint with the model's own template.
  const io::TrainConfig cfg = io::Config::parse("", "t", {"finetune.task=sft", "finetune.train_file=unused.jsonl",
                                                          "finetune.chat_template=tokenizer"})
                                  .resolve();
  const auto tok = io::tokenizer_from_json(state["tokenizer"]);
  const auto chat = train::load_sft_chat_template(cfg, (root / "run").string(), *tok);
  ASSERT_TRUE(chat.has_value());
  EXPECT_EQ(chat->text, kTemplate);
  EXPECT_EQ(chat->tokens.eos, "<|im_end|>");

  train::export_hf((root / "run").string(), root / "exported");
  const nlohmann::json written = test::read_json((root / "exported" / "tokenizer_config.json").string());
  EXPECT_EQ(written["chat_template"], kTemplate);
  EXPECT_EQ(written["eos_token"], "<|im_end|>");
  EXPECT_FALSE(written.contains("bos_token"));  // it had none
  EXPECT_EQ(written["tokenizer_class"], "PreTrainedTokenizerFast");
  fs::remove_all(root);
}

TEST(HfChatTemplate, JinjaFileWinsOverTokenizerConfigAndNoTemplateWritesNoConfig) {
  const fs::path root = test::fresh_test_dir("hf_chat_");
  const nlohmann::json tokenizer_config = {{"chat_template", "old {{ messages }}"}, {"eos_token", "<|endoftext|>"}};
  const fs::path hf = qwen2_folder_with(
      root, {{"tokenizer_config.json", tokenizer_config.dump()}, {"chat_template.jinja", kTemplate}});
  const auto found = train::hf_folder_chat_template(hf);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->text, kTemplate);
  EXPECT_EQ(found->tokens.eos, "<|endoftext|>");

  // A folder without a template: the checkpoint holds none and the export writes no tokenizer_config.json.
  const fs::path plain = qwen2_folder_with(root / "plain", {});
  EXPECT_FALSE(train::hf_folder_chat_template(plain).has_value());
  train::import_hf(plain, root / "plain_run");
  EXPECT_FALSE(test::read_json(latest_state(root / "plain_run")).contains("chat_template"));
  train::export_hf((root / "plain_run").string(), root / "plain_exported");
  EXPECT_FALSE(fs::exists(root / "plain_exported" / "tokenizer_config.json"));
  fs::remove_all(root);
}
