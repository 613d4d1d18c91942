// io::ChatTemplate on arbitrary template text (a tokenizer_config.json's "chat_template" comes
// from whoever published the model) and, after a NUL byte, an arbitrary JSON list of messages:
// parsing and rendering either succeed or are refused with trireme::Error (io::ConfigError);
// never a crash, undefined behaviour or a hang (the renderer bounds nesting, loops and output).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "trireme/core/error.h"
#include "trireme/io/chat_template.h"

using namespace trireme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [source, rest] = fuzz::split_at_nul({reinterpret_cast<const char*>(data), size});
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded())
    messages = {{{"role", "system"}, {"content", "你是助手"}}, {{"role", "user"}, {"content", "床前明月光"}},
                {{"role", "assistant"}, {"content", "疑是地上霜"}}};
  try {
    const io::ChatTemplate t{std::string(source), "fuzz.jinja"};
    for (bool generation_prompt : {false, true}) {
      const std::string text = t.render_conversation(messages, generation_prompt, "<s>", "</s>");
      FUZZ_REQUIRE(text.size() <= (size_t(64) << 20), "the output stays within the renderer's limit");
    }
  } catch (const Error&) {
  }
  return 0;
}
