// docs/ENVIRONMENT.md's table names exactly the environment variables read under src/: a
// variable added to the code without a row, or a row for one nothing reads, fails here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = TRIREME_SOURCE_DIR;

// Files that read variables through a lookup helper or a loop over a list of names: every
// upper-case string literal in them counts as a variable read.
const std::set<std::string> kNameListFiles = {
    "src/trireme/dist/env.cpp",            // dist_env_from_environment's lookup
    "src/trireme/runtime/build_info.cpp",  // `trireme env`'s list of standard variables
};
// The getenv calls whose argument is not a literal and that are accounted for: the name lists
// above, and cpu_setup.cpp's getenv handed to plan_cpu_environment (which reads literals). A
// named constant kSomethingEnv is allowed anywhere: its value is a "TRIREME_..." literal, which
// counts. Any other computed name fails the test, so that the table cannot miss it.
const std::set<std::string> kComputedReads = {
    "src/trireme/dist/env.cpp: getenv(name.c_str())",
    "src/trireme/runtime/build_info.cpp: getenv(v)",
    "src/trireme/runtime/cpu_setup.cpp: getenv(v)",
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void add_matches(const std::string& text, const std::regex& re, std::set<std::string>& out) {
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) out.insert((*it)[1].str());
}

struct SourceReads {
  std::set<std::string> names;
  std::set<std::string> unexplained;  // "file: getenv(expression)" not in kComputedReads
};

SourceReads variables_read_under_src() {
  static const std::regex literal_getenv(R"(getenv\(\s*"([A-Za-z_][A-Za-z_0-9]*)\")");
  static const std::regex any_getenv(R"(getenv\(\s*([^"()\s][^;()]*(?:\(\))?)\))");
  static const std::regex trireme_literal(R"re("(TRIREME_[A-Z_0-9]+)")re");
  static const std::regex upper_literal(R"re("([A-Z][A-Z_0-9]{2,})")re");
  static const std::regex env_constant(R"(k[A-Z][A-Za-z0-9]*Env)");
  SourceReads r;
  for (const auto& e : fs::recursive_directory_iterator(kRoot / "src")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
    const std::string rel = fs::relative(e.path(), kRoot).generic_string();
    const std::string text = read_all(e.path());
    add_matches(text, literal_getenv, r.names);
    add_matches(text, trireme_literal, r.names);
    if (kNameListFiles.count(rel)) add_matches(text, upper_literal, r.names);
    std::set<std::string> computed;
    add_matches(text, any_getenv, computed);
    for (const std::string& c : computed) {
      const std::string read = rel + ": getenv(" + c + ")";
      if (!std::regex_match(c, env_constant) && !kComputedReads.count(read)) r.unexplained.insert(read);
    }
  }
  return r;
}

// The backquoted names in the first cell of each row of the doc's table.
std::set<std::string> variables_in_table() {
  std::istringstream in(read_all(kRoot / "docs" / "ENVIRONMENT.md"));
  static const std::regex name(R"(`([A-Za-z_][A-Za-z_0-9]*)`)");
  std::set<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
    add_matches(first_cell, name, out);
  }
  return out;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

}  // namespace

TEST(EnvironmentDoc, TableMatchesSources) {
  const SourceReads src = variables_read_under_src();
  const std::set<std::string> table = variables_in_table();
  ASSERT_FALSE(table.empty()) << "no table rows in docs/ENVIRONMENT.md";
  EXPECT_TRUE(src.unexplained.empty())
      << "getenv with a computed name (account for it in kComputedReads and its variables in docs/ENVIRONMENT.md): "
      << join(src.unexplained);
  std::set<std::string> undocumented, stale;
  for (const auto& n : src.names)
    if (!table.count(n)) undocumented.insert(n);
  for (const auto& n : table)
    if (!src.names.count(n)) stale.insert(n);
  EXPECT_TRUE(undocumented.empty()) << "read under src/ but not in docs/ENVIRONMENT.md's table: " << join(undocumented);
  EXPECT_TRUE(stale.empty()) << "in docs/ENVIRONMENT.md's table but read nowhere under src/: " << join(stale);
}
