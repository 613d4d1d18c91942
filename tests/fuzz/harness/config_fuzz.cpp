// Config::parse on arbitrary TOML text (and, after a NUL byte, one `--set` override per line):
// refused with ConfigError, or it resolves, and its to_toml() parses back to an equal Config
// (checkpoints and run folders rely on that round trip).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "trireme/io/config.h"

using namespace trireme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [toml, rest] = fuzz::split_at_nul({reinterpret_cast<const char*>(data), size});
  std::vector<std::string> overrides;
  for (size_t begin = 0; begin < rest.size();) {
    size_t end = rest.find('\n', begin);
    if (end == std::string_view::npos) end = rest.size();
    overrides.emplace_back(rest.substr(begin, end - begin));
    begin = end + 1;
  }
  io::Config cfg;
  io::TrainConfig resolved;
  try {
    cfg = io::Config::parse(toml, "fuzz.toml", overrides);
    resolved = cfg.resolve();
  } catch (const io::ConfigError&) {
    return 0;
  }
  const std::string saved = cfg.to_toml();
  io::Config again;
  try {
    again = io::Config::parse(saved, "saved.toml");
  } catch (const io::ConfigError& e) {
    std::fprintf(stderr, "to_toml() gave text that does not parse:\n%s\n%s\n", saved.c_str(), e.what());
    FUZZ_REQUIRE(false, "to_toml() parses back");
  }
  FUZZ_REQUIRE(again == cfg, "to_toml() parses back to an equal Config");
  return 0;
}
