// Progress bar and plain log lines.
#include "trireme/train/progress.h"

#include <unistd.h>

#include <cmath>

namespace trireme::train {

Progress::Progress(int64_t total_steps, int64_t log_interval, bool interactive)
    : total_(total_steps), log_interval_(std::max<int64_t>(1, log_interval)), interactive_(interactive) {}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  int64_t t = int64_t(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t % 3600 / 60));
  } else if (t >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  }
  return buf;
}

void Progress::update(int64_t step, double loss, double tokens_per_s, double elapsed_s) {
  const double eta = step > 0 ? elapsed_s / double(step) * double(total_ - step) : NAN;
  if (interactive_) {
    auto now = std::chrono::steady_clock::now();
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const int width = 30;
    int filled = total_ > 0 ? int(double(width) * double(step) / double(total_)) : width;
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    std::fprintf(stderr, "\r[%s] %lld/%lld loss %.4f | %.0f tok/s | ETA %s   ", bar.c_str(), (long long)step,
                 (long long)total_, loss, tokens_per_s, format_duration(eta).c_str());
    std::fflush(stderr);
    bar_drawn_ = true;
  } else if (step % log_interval_ == 0 || step == total_ || step == 1) {
    std::fprintf(stderr, "step %lld/%lld loss %.4f | %.0f tok/s | elapsed %s | ETA %s\n", (long long)step,
                 (long long)total_, loss, tokens_per_s, format_duration(elapsed_s).c_str(),
                 format_duration(eta).c_str());
  }
}

void Progress::note(const std::string& line) {
  if (bar_drawn_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", line.c_str());
  bar_drawn_ = false;
}

void Progress::finish() {
  if (bar_drawn_) std::fprintf(stderr, "\n");
  bar_drawn_ = false;
}

}  // namespace trireme::train
