// Progress log lines and the live bar (see progress.h).
#include "trireme/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace trireme::train {

Progress::Progress(const ProgressOptions& options) : o_(options) { o_.log_interval = std::max<int64_t>(1, o_.log_interval); }

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

std::string format_count(double n) {
  if (!std::isfinite(n) || n < 0) return "?";
  std::string digits = std::to_string((long long)std::llround(n)), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Progress::log_line(const StepProgress& p, int64_t interval_steps, double interval_s,
                               int64_t interval_tokens) const {
  char buf[256];
  const double ms_per_step = interval_steps > 0 ? 1e3 * interval_s / double(interval_steps) : NAN;
  const double tokens_per_s = interval_s > 0 ? double(interval_tokens) / interval_s : NAN;
  int n = std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | %.1f ms/step | %s tok/s | lr %.2e",
                        (long long)p.step, (long long)o_.total_steps, p.loss, ms_per_step,
                        format_count(tokens_per_s).c_str(), p.lr);
  std::string line(buf, size_t(std::max(n, 0)));
  if (o_.flops_per_token > 0 && o_.peak_flops > 0 && std::isfinite(tokens_per_s)) {
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100.0 * o_.flops_per_token * tokens_per_s / o_.peak_flops);
    line += buf;
  }
  const int64_t done = p.step - o_.first_step;
  const double eta = done > 0 ? p.elapsed_s / double(done) * double(o_.total_steps - p.step) : NAN;
  if (p.step < o_.total_steps) line += " | ETA " + format_duration(eta);
  return line;
}

void Progress::clear_bar() {
  if (bar_drawn_) std::fprintf(o_.out, "\r\033[K");
  bar_drawn_ = false;
}

void Progress::update(const StepProgress& p) {
  interval_steps_ += 1;
  interval_tokens_ += p.tokens;
  interval_s_ += p.step_s;
  const bool last = p.step == o_.total_steps;
  if (p.step % o_.log_interval == 0 || last || p.step == o_.first_step + 1) {
    const double tokens_per_s = interval_s_ > 0 ? double(interval_tokens_) / interval_s_ : NAN;
    last_rate_ = format_count(tokens_per_s);
    clear_bar();
    std::fprintf(o_.out, "%s\n", log_line(p, interval_steps_, interval_s_, interval_tokens_).c_str());
    interval_steps_ = interval_tokens_ = 0;
    interval_s_ = 0;
    last_draw_ = {};  // redraw the bar under the new line now
  }
  if (!o_.interactive) {
    std::fflush(o_.out);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!last && bar_drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const int64_t done = p.step - o_.first_step;
  const double eta = done > 0 ? p.elapsed_s / double(done) * double(o_.total_steps - p.step) : NAN;
  const int width = 30;
  const int filled = o_.total_steps > 0 ? int(double(width) * double(p.step) / double(o_.total_steps)) : width;
  std::string bar(size_t(std::clamp(filled, 0, width)), '#');
  bar.append(size_t(width) - bar.size(), '.');
  std::fprintf(o_.out, "\r[%s] %lld/%lld loss %.4f | %s tok/s | ETA %s\033[K", bar.c_str(), (long long)p.step,
               (long long)o_.total_steps, p.loss, last_rate_.c_str(), format_duration(eta).c_str());
  std::fflush(o_.out);
  bar_drawn_ = true;
}

void Progress::note(const std::string& line) {
  clear_bar();
  std::fprintf(o_.out, "%s\n", line.c_str());
  std::fflush(o_.out);
  last_draw_ = {};
}

void Progress::finish() {
  if (bar_drawn_) std::fprintf(o_.out, "\n");
  bar_drawn_ = false;
  std::fflush(o_.out);
}

}  // namespace trireme::train
