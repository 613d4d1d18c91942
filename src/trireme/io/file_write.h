// Writing files so that a failure is never silent: every write, flush, fsync, close and rename is
// checked, and an error names the file and the system's reason (errno), e.g.
//   "cannot write 'out/metrics.jsonl': No space left on device"
//
//   write_file_atomic("out/data/tokenizer.json", json_text);  // all or nothing, durable
//   AppendFile metrics("out/metrics.jsonl", AppendFile::Mode::kTruncate);
//   metrics.write_line(row.dump());                               // throws on a full disk
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace trireme::io {

// Writes `bytes` to `path` (truncating), fsyncs it when `durable`, closes it; each step checked.
void write_file(const std::filesystem::path& path, std::string_view bytes, bool durable = true);

// Writes a temporary file beside `path`, fsyncs it, renames it over `path` and fsyncs the folder:
// readers see the old file or the new one, never a partial one.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// fsync of a file or a folder (after a rename, so the new name survives a power loss).
void fsync_path(const std::filesystem::path& path, bool directory);

// The whole of a file, or an error naming it and errno.
std::string read_file(const std::filesystem::path& path);

// A file written line by line (metrics, logs). Each line is written whole with one write(2)
// call and checked; a short write or an error throws naming the file and errno.
class AppendFile {
 public:
  enum class Mode { kAppend, kTruncate };
  AppendFile(const std::filesystem::path& path, Mode mode);
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  void write_line(std::string_view line);  // appends '\n'
  void sync();                             // fsync: what was written survives a crash
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace trireme::io
