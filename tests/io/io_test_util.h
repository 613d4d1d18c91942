// Helpers shared by the io tests: a scratch folder per test and the poem corpus (when installed).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/io/corpus.h"

namespace trireme::io::testing {

// A fresh empty folder under the system temp folder, named after the running test.
inline std::filesystem::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             ("trireme_io_" + std::string(info->test_suite_name()) + "_" + info->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline bool poems_installed() {
  return std::filesystem::exists(std::filesystem::path(default_fortunes_dir()) / "tang300");
}

// The poem corpus text, loaded once per test binary.
inline const std::string& poem_text() {
  static const std::string text = load_poem_corpus().text();
  return text;
}

// The ConfigError message from parsing `text` with `overrides`; fails the test if it parses.
inline std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    Config::parse(text, "train.toml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "config was accepted:\n" << text;
  return "";
}

}  // namespace trireme::io::testing
