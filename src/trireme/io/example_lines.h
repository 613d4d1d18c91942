// The one-example-per-line files of fine-tuning (SFT's JSONL, classification's JSONL or CSV):
// reading them line by line with the same rules for every format.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace trireme::io {

// Calls `parse(line, where, n)` for every line of `path` that is not blank (a trailing CR and a
// leading byte-order mark removed; `where` is "PATH line N" for messages). A line that is not
// valid UTF-8, or on which `parse` throws ConfigError, is malformed: it is refused (a ConfigError
// naming the file and the line, and what to do) or, with `skip_bad_lines`, skipped. Returns the
// number of lines skipped. A file that cannot be opened is a ConfigError naming it.
int64_t read_example_lines(const std::string& path, bool skip_bad_lines,
                           const std::function<void(const std::string& line, const std::string& where, int64_t n)>& parse);

}  // namespace trireme::io
