// Paths and readers of the committed Hugging Face fixtures (tests/fixtures/hf/make_fixtures.py).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace trireme::test {

inline std::string hf_fixture(const std::string& rel) { return std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/" + rel; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A fresh, empty folder for the running test: temp/<prefix><test name><pid>.
inline std::filesystem::path fresh_test_dir(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name() + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace trireme::test
