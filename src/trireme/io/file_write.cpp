// Checked file writes (see file_write.h).
#include "trireme/io/file_write.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "trireme/core/error.h"

namespace fs = std::filesystem;

namespace trireme::io {
namespace {

[[noreturn]] void fail(const char* what, const fs::path& path, int err) {
  TRIREME_FAIL("cannot ", what, " '", path.string(), "': ", std::strerror(err));
}

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail("write", path, err);
    }
    if (n == 0) {
      ::close(fd);
      fail("write", path, ENOSPC);
    }
    done += size_t(n);
  }
}

}  // namespace

void fsync_path(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC));
  if (fd < 0) fail("open (to sync)", path, errno);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("sync", path, err);
  }
  ::close(fd);
}

void write_file(const fs::path& path, std::string_view bytes, bool durable) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", path, errno);
  write_all(fd, bytes, path);
  if (durable && ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    fail("sync", path, err);
  }
  if (::close(fd) != 0) fail("close", path, errno);
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp." + std::to_string(::getpid()));
  try {
    write_file(tmp, bytes, /*durable=*/true);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    fail("rename a temporary file onto", path, err);
  }
  fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path(), true);
}

std::string read_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path, errno);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      fail("read", path, err);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

AppendFile::AppendFile(const fs::path& path, Mode mode) : path_(path) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (mode == Mode::kAppend ? O_APPEND : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) fail("open for writing", path, errno);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::write_line(std::string_view line) {
  std::string whole(line);
  whole += '\n';
  size_t done = 0;
  while (done < whole.size()) {
    ssize_t n = ::write(fd_, whole.data() + done, whole.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", path_, errno);
    if (n == 0) fail("write", path_, ENOSPC);
    done += size_t(n);
  }
}

void AppendFile::sync() {
  if (::fsync(fd_) != 0) fail("sync", path_, errno);
}

}  // namespace trireme::io
