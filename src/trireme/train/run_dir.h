// The run folder (train.out_dir) as a trainer owns it: one trainer at a time, and a fresh run
// never writes over an earlier run's checkpoints or metrics unless asked to.
//
//   RunLock lock(out_dir);                        // or RunRefused: "... in use by pid 1234 ..."
//   if (auto what = earlier_run(out_dir)) ...     // "checkpoints (newest step_00000030), metrics.jsonl"
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "trireme/io/config.h"

namespace trireme::train {

// A run that must not start (the folder is in use, or holds another run): the CLI prints the
// message on one line and exits with status 2.
class RunRefused : public io::ConfigError {
 public:
  using io::ConfigError::ConfigError;
};

// flock on out_dir/.lock, holding this process's pid, for the object's lifetime. A second
// trainer on the same folder (any process, also this one) is refused naming the holder's pid.
class RunLock {
 public:
  explicit RunLock(const std::filesystem::path& out_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// The pid holding out_dir's lock, or nullopt when it is free (checked without keeping it).
std::optional<long> run_lock_holder(const std::filesystem::path& out_dir);

// What an earlier run left in out_dir (checkpoints, a non-empty metrics.jsonl), or nullopt.
// out_dir/data (a cache of the tokenized corpus) and out_dir/logs do not count.
std::optional<std::string> earlier_run(const std::filesystem::path& out_dir);

// Removes an earlier run's checkpoints, metrics.jsonl and loss.svg (keeps data/ and logs/).
void remove_earlier_run(const std::filesystem::path& out_dir);

// The refusal message for a fresh run into a folder holding `what`.
std::string earlier_run_refusal(const std::filesystem::path& out_dir, const std::string& what);

}  // namespace trireme::train
