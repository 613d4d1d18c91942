// Paths and readers of the committed Hugging Face fixtures (tests/fixtures/hf/make_fixtures.py).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace trireme::test {

inline std::string hf_fixture(const std::string& rel) { return std::string(TRIREME_SOURCE_DIR) + "/tests/fixtures/hf/" + rel; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace trireme::test
