// Run folder ownership (see run_dir.h).
#include "trireme/train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "trireme/core/error.h"
#include "trireme/io/file_write.h"

namespace fs = std::filesystem;

namespace trireme::train {
namespace {

fs::path lock_path(const fs::path& out_dir) { return out_dir / ".lock"; }

std::string holder_text(const fs::path& path) {
  std::string pid;
  try {
    pid = io::read_file(path);
  } catch (const Error&) {
  }
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.empty() ? std::string("unknown pid") : "pid " + pid;
}

}  // namespace

RunLock::RunLock(const fs::path& out_dir) {
  const fs::path path = lock_path(out_dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TRIREME_CHECK(fd_ >= 0, "cannot open '", path.string(), "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) TRIREME_FAIL("cannot lock '", path.string(), "': ", std::strerror(err));
    throw RunRefused(str_cat("train.out_dir '", out_dir.string(), "' is in use by another trainer (", holder_text(path),
                             ", holding ", path.string(), "); wait for it to finish, stop it, or use another train.out_dir"));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    TRIREME_FAIL("cannot write '", path.string(), "': ", std::strerror(err));
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

std::optional<long> run_lock_holder(const fs::path& out_dir) {
  const fs::path path = lock_path(out_dir);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  if (!held) return std::nullopt;
  try {
    return std::stol(io::read_file(path));
  } catch (const std::exception&) {
    return -1L;
  }
}

std::optional<std::string> earlier_run(const fs::path& out_dir) {
  std::vector<std::string> parts;
  const fs::path ckpts = out_dir / "checkpoints";
  if (fs::is_directory(ckpts)) {
    std::vector<std::string> steps;
    bool pointer = false;
    for (const auto& e : fs::directory_iterator(ckpts)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step_", 0) == 0) steps.push_back(n);
      pointer |= n == "latest";
    }
    if (!steps.empty()) {
      parts.push_back(str_cat("checkpoints (newest ", *std::max_element(steps.begin(), steps.end()), ")"));
    } else if (pointer) {
      parts.push_back("checkpoints/latest");
    }
  }
  const fs::path metrics = out_dir / "metrics.jsonl";
  std::error_code ec;
  if (fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0) parts.push_back("metrics.jsonl");
  if (parts.empty()) return std::nullopt;
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) out += " and " + parts[i];
  return out;
}

void remove_earlier_run(const fs::path& out_dir) {
  fs::remove_all(out_dir / "checkpoints");
  fs::remove(out_dir / "metrics.jsonl");
  fs::remove(out_dir / "loss.svg");
}

std::string earlier_run_refusal(const fs::path& out_dir, const std::string& what) {
  return str_cat("train.out_dir '", out_dir.string(), "' already holds a run (", what,
                 "); use --resume to continue, --overwrite to start over, or another train.out_dir");
}

}  // namespace trireme::train
