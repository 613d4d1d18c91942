// What the harnesses share: a way to state a documented property of the code under test, so
// libFuzzer records an input that breaks it as a crash (not only memory errors and UB), and a
// private temporary folder for the harnesses whose entry point reads files.
//
// The harnesses catch trireme::Error only: every refusal of bad input must be one (it names the
// file and what is wrong). Any other exception escaping the library is a finding.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>

// Aborts with the property and where it is stated when `cond` does not hold.
#define FUZZ_REQUIRE(cond, what)                                                              \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "fuzz property broken at %s:%d: %s (%s)\n", __FILE__, __LINE__, \
                   what, #cond);                                                              \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace fuzz {

// A folder of this process's own under $TMPDIR (or /tmp), made on first use, removed at exit.
inline const std::filesystem::path& temp_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "trireme-fuzz-XXXXXX").string();
    FUZZ_REQUIRE(::mkdtemp(pattern.data()) != nullptr, "a temporary folder can be made");
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(temp_dir(), ignored);
    });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// Writes bytes to path, replacing it.
inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_REQUIRE(f != nullptr, "the temporary file can be opened");
  FUZZ_REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size(), "the temporary file is written");
  FUZZ_REQUIRE(std::fclose(f) == 0, "the temporary file is closed");
}

// Splits the input at the first NUL byte: harnesses with two inputs (a file and a text, a TOML
// document and overrides) take them this way, since neither JSON nor TOML text holds a raw NUL.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view bytes) {
  const size_t nul = bytes.find('\0');
  if (nul == std::string_view::npos) return {bytes, {}};
  return {bytes.substr(0, nul), bytes.substr(nul + 1)};
}

}  // namespace fuzz
