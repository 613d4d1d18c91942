// Predicted against measured: each plan runs through `trireme train --nproc N` (plan_measure.h).
#include "trireme/cli/plan_measure.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "trireme/cli/commands.h"
#include "trireme/train/memory_check.h"

namespace trireme::cli {

namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 10;  // the first two are warm-up and not counted; the median of the other 8 step times

std::string self_exe() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return n > 0 ? std::string(exe, size_t(n)) : std::string("trireme");
}

// Runs argv with stdout and stderr to `log`; the exit status.
int run_quietly(const std::vector<std::string>& argv, const fs::path& log) {
  const pid_t pid = ::fork();
  TRIREME_CHECK(pid >= 0, "plan --measure: fork failed");
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "w");
    if (f != nullptr) ::dup2(fileno(f), 1), ::dup2(fileno(f), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

MeasuredRun measured_run(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line;
  std::vector<double> elapsed;
  MeasuredRun m;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("elapsed_s")) continue;
    elapsed.push_back(j["elapsed_s"].get<double>());
    m.peak_bytes = std::max(m.peak_bytes, j.value("peak_memory_bytes", 0.0));
  }
  std::vector<double> steps;
  for (size_t i = 2; i < elapsed.size(); ++i) steps.push_back(elapsed[i] - elapsed[i - 1]);
  if (!steps.empty()) {
    std::sort(steps.begin(), steps.end());
    m.step_s = steps[steps.size() / 2];
    m.fastest_step_s = steps.front();
    m.slowest_step_s = steps.back();
  }
  return m;
}

std::string prediction_against_run(const plan::Plan& p, const MeasuredRun& m) {
  char buf[512];
  auto pct = [](double pred, double meas) { return meas > 0 ? 100 * (pred - meas) / meas : 0.0; };
  if (m.step_s <= 0) {
    std::snprintf(buf, sizeof(buf), "predicted %.1f ms per step and %s peak on rank 0; too few steps to measure",
                  p.cost.step_s * 1e3, train::format_bytes(p.cost.rank0_bytes).c_str());
  } else {
    std::snprintf(buf, sizeof(buf),
                  "predicted %.1f ms per step and %s peak on rank 0; measured %.1f ms and %s (%+.0f%%, %+.0f%%)",
                  p.cost.step_s * 1e3, train::format_bytes(p.cost.rank0_bytes).c_str(), m.step_s * 1e3,
                  train::format_bytes(m.peak_bytes).c_str(), pct(p.cost.step_s, m.step_s),
                  pct(p.cost.rank0_bytes, m.peak_bytes));
  }
  return buf;
}

int measure_plans(const std::string& config_path, const std::vector<std::string>& overrides,
                  const plan::SearchResult& r, const std::vector<plan::Plan>& all, int k) {
  const fs::path dir = fs::temp_directory_path() / str_cat("trireme_plan_measure_", ::getpid());
  fs::create_directories(dir);
  std::printf(
      "\nmeasured (%d steps each through trireme train --nproc, the first 2 not counted; rank 0's peak "
      "memory beside its estimate):\n",
      kSteps);
  std::printf("%-3s %-50s %12s %12s %15s %7s %11s %11s %7s\n", "#", "layout", "predicted", "measured", "steps' range",
              "error", "peak pred", "peak meas", "error");
  // Plans the host binds (plan::PlanCost::host_bound) run at the CPU's pace, which a shared
  // machine's clock moves from run to run: their errors are also given apart.
  int status = kExitOk;
  double sum_error = 0, worst_error = 0, sum_mem_error = 0, worst_mem_error = 0;
  int n = 0;
  double device_sum_error = 0, device_worst_error = 0;
  int device_n = 0;
  double chosen_s = 0, fastest_s = 0;  // the plan ranked first, and the fastest of those measured
  int fastest = 0;
  // The top k, then a sample of the rest: the other splits' best plans, then the best plan of each
  // micro-batch count and recomputation mode that no chosen plan has.
  std::vector<plan::Plan> chosen(r.plans.begin(), r.plans.begin() + std::min<size_t>(size_t(k), r.plans.size()));
  const size_t top = chosen.size();
  auto add_unless = [&](const plan::Plan& p, auto&& same) {
    if (chosen.size() >= top + size_t(k) || !p.cost.fits) return;
    if (std::none_of(chosen.begin(), chosen.end(), [&](const plan::Plan& q) { return same(q.layout, p.layout); }))
      chosen.push_back(p);
  };
  auto same_layout = [](const plan::Layout& a, const plan::Layout& b) { return a == b; };
  auto same_micro_batches_and_recompute = [](const plan::Layout& a, const plan::Layout& b) {
    return a.micro_batches == b.micro_batches && a.recompute == b.recompute;
  };
  for (const plan::Plan& p : r.best_per_split) add_unless(p, same_layout);
  for (const plan::Plan& p : all) add_unless(p, same_micro_batches_and_recompute);
  for (int i = 0; i < int(chosen.size()); ++i) {
    const plan::Plan& p = chosen[size_t(i)];
    if (size_t(i) == top)
      std::printf("a sample of the others, each the best of its split, or of its micro-batches and recomputation:\n");
    const fs::path out = dir / str_cat("plan_", i + 1);
    std::vector<std::string> argv = {self_exe(), "train", "--nproc", std::to_string(p.layout.devices()), "--overwrite"};
    if (!config_path.empty()) argv.insert(argv.end(), {"--config", config_path});
    std::vector<std::string> sets = overrides;
    for (const auto& o : p.layout.overrides()) sets.push_back(o);
    for (const char* o : {"train.eval_interval=0", "train.checkpoint_interval=0", "train.log_interval=1",
                          "parallel.auto=false", "schedule.warmup_steps=0"})
      sets.push_back(o);
    sets.push_back(str_cat("train.steps=", kSteps));
    sets.push_back(str_cat("train.out_dir=", out.string()));
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    const int rc = run_quietly(argv, dir / str_cat("plan_", i + 1, ".log"));
    const MeasuredRun m = rc == 0 ? measured_run((out / "metrics.jsonl").string()) : MeasuredRun{};
    if (rc != 0 || m.step_s <= 0) {
      std::printf("%-3d %-50s the run failed (exit %d); its log: %s\n", i + 1, p.layout.describe().c_str(), rc,
                  (dir / str_cat("plan_", i + 1, ".log")).c_str());
      status = kExitFailure;
      continue;
    }
    const double err = (p.cost.step_s - m.step_s) / m.step_s;
    const double mem_err = m.peak_bytes > 0 ? (p.cost.rank0_bytes - m.peak_bytes) / m.peak_bytes : 0;
    sum_error += std::abs(err), worst_error = std::max(worst_error, std::abs(err)), ++n;
    sum_mem_error += std::abs(mem_err), worst_mem_error = std::max(worst_mem_error, std::abs(mem_err));
    if (!p.cost.host_bound)
      device_sum_error += std::abs(err), device_worst_error = std::max(device_worst_error, std::abs(err)), ++device_n;
    if (i == 0) chosen_s = m.step_s;
    if (fastest == 0 || m.step_s < fastest_s) fastest = i + 1, fastest_s = m.step_s;
    char range[48];
    std::snprintf(range, sizeof(range), "%.1f-%.1fms", m.fastest_step_s * 1e3, m.slowest_step_s * 1e3);
    std::printf("%-3d %-50s %10.1fms %10.1fms %15s %+6.0f%% %11s %11s %+6.0f%%%s\n", i + 1, p.layout.describe().c_str(),
                p.cost.step_s * 1e3, m.step_s * 1e3, range, 100 * err,
                train::format_bytes(p.cost.rank0_bytes).c_str(), train::format_bytes(m.peak_bytes).c_str(),
                100 * mem_err, p.cost.host_bound ? "  host-bound" : "");
  }
  if (n > 0) {
    std::printf("step time: mean |predicted - measured| / measured %.0f%%, largest %.0f%%\n", 100 * sum_error / n,
                100 * worst_error);
    if (device_n < n)
      std::printf("  %d host-bound (their pace is the CPU's); the other %d: mean %.0f%%, largest %.0f%%\n",
                  n - device_n, device_n, device_n > 0 ? 100 * device_sum_error / device_n : 0.0,
                  100 * device_worst_error);
    std::printf("peak memory: mean |predicted - measured| / measured %.1f%%, largest %.1f%%\n",
                100 * sum_mem_error / n, 100 * worst_mem_error);
    if (chosen_s > 0)
      std::printf("the chosen plan (#1) measured %.1f ms; the fastest measured, #%d, %.1f ms: the choice is %.1f%% slower\n",
                  chosen_s * 1e3, fastest, fastest_s * 1e3, 100 * (chosen_s - fastest_s) / fastest_s);
  }
  if (status == kExitOk) fs::remove_all(dir);
  return status;
}

}  // namespace trireme::cli
