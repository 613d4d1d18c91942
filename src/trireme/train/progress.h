// Progress reporting: a live one-line bar on a terminal (step/total, loss, tokens/s, ETA),
// plain log lines otherwise (files, CI, pipes).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trireme::train {

class Progress {
 public:
  // interactive: draw a bar (default: whether stderr is a terminal).
  Progress(int64_t total_steps, int64_t log_interval, bool interactive);
  static bool stderr_is_terminal();

  // Called after every step; prints when due.
  void update(int64_t step, double loss, double tokens_per_s, double elapsed_s);
  // A line that must not be overwritten (validation results, checkpoints).
  void note(const std::string& line);
  void finish();

 private:
  int64_t total_;
  int64_t log_interval_;
  bool interactive_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_duration(double seconds);  // "1m05s", "2h03m"

}  // namespace trireme::train
