#include "trireme/io/example_lines.h"

#include <fstream>

#include "trireme/core/error.h"
#include "trireme/io/config.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

int64_t read_example_lines(const std::string& path, bool skip_bad_lines,
                           const std::function<void(const std::string& line, const std::string& where, int64_t n)>& parse) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(str_cat("finetune: cannot open '", path, "'"));
  int64_t skipped = 0;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line = line.substr(3);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = str_cat(path, " line ", n);
    try {
      if (!utf8_is_valid(line)) throw ConfigError(str_cat(where, ": not valid UTF-8"));
      parse(line, where, n);
    } catch (const ConfigError& e) {
      if (!skip_bad_lines)
        throw ConfigError(str_cat(e.what(), " (fix or remove the line, or set finetune.bad_lines = \"skip\")"));
      ++skipped;
    }
  }
  return skipped;
}

}  // namespace trireme::io
