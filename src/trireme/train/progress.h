// Progress reporting. Every train.log_interval steps (and at the first and last step) a log line:
//
//   step 200/1000 | loss 2.3456 | 12.3 ms/step | 41,600 tok/s | lr 3.00e-04 | MFU 31.2% | ETA 9s
//
// ms/step and tok/s are over the steps since the previous line (time inside the training steps:
// evaluations and checkpoints are left out), so they show the current speed, not an average
// since step 1. MFU appears only when the device's peak is known (throughput.h). On a terminal
// the lines stay on screen and a live bar (step/total, loss, ETA) is redrawn below the last one;
// elsewhere (files, CI, pipes) only the lines are written.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace trireme::train {

struct ProgressOptions {
  int64_t total_steps = 0;
  int64_t log_interval = 1;
  bool interactive = false;     // draw the live bar (the CLI: whether stderr is a terminal)
  int64_t first_step = 0;       // steps done before this run (a resume): ETA and rates start here
  double flops_per_token = 0;   // model FLOPs per trained token (forward + backward); 0: unknown
  double peak_flops = 0;        // FLOP/s of all the devices together; 0: unknown, no MFU
  std::FILE* out = stderr;
};

// What one finished step reports.
struct StepProgress {
  int64_t step = 0;        // 1-based: steps done in total
  double loss = 0;
  double lr = 0;
  int64_t tokens = 0;      // tokens this step trained on (the global batch)
  double step_s = 0;       // wall time of the step itself
  double elapsed_s = 0;    // wall time since the run's loop began (for the ETA)
};

class Progress {
 public:
  explicit Progress(const ProgressOptions& options);
  static bool stderr_is_terminal();

  // Called after every step; prints a log line when due and redraws the bar.
  void update(const StepProgress& p);
  // A line that must not be overwritten (validation results, checkpoints).
  void note(const std::string& line);
  void finish();

  // The log line for the interval that ends with `p` (exposed for tests).
  std::string log_line(const StepProgress& p, int64_t interval_steps, double interval_s, int64_t interval_tokens) const;

 private:
  void clear_bar();
  ProgressOptions o_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
  // Totals since the previous log line.
  int64_t interval_steps_ = 0, interval_tokens_ = 0;
  double interval_s_ = 0;
  std::string last_rate_;  // the latest line's tok/s, shown on the bar
};

std::string format_duration(double seconds);  // "1m05s", "2h03m"
std::string format_count(double n);           // 41600 -> "41,600"

}  // namespace trireme::train
