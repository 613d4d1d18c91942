// What the `trireme train --nproc N` tests share: the tiny GPT-on-the-poems config, running the
// CLI with its output captured, and reading a run's per-step metrics.
#pragma once

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trireme::parallel::testing {

// d_model 32, 4 layers, block 8, batch 8, constant lr, 12 steps: evaluation, checkpoint and log
// line every 6; data-parallel replicas checked for equal parameters after every step.
inline const char* kConfig = R"(
[model]
d_model = 32
n_layer = 4
n_head = 4
block_size = 8
dropout = 0.0
[data]
corpus = ["tang"]
tokenizer = "char"
[optim]
lr = 3e-3
grad_clip = 1.0
[schedule]
kind = "constant"
warmup_steps = 0
[train]
steps = 12
batch_size = 8
eval_interval = 6
eval_batches = 2
checkpoint_interval = 6
log_interval = 6
threads = 1
[parallel]
replica_check_interval = 1
)";

struct Result {
  int status = -1;
  std::string output;
};

// Runs the trireme binary (TRIREME_BINARY) with `args` (shell-quoted by the caller), output captured.
inline Result run_cli(const std::string& args) {
  Result r;
  std::string cmd = std::string(TRIREME_BINARY) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

struct Step {
  double loss = 0, grad_norm = 0, val_loss = NAN;
};

inline std::vector<Step> read_metrics(const std::filesystem::path& out_dir) {
  std::vector<Step> steps;
  std::ifstream f(out_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    Step s{j["loss"].get<double>(), j["grad_norm"].get<double>()};
    if (j.contains("val_loss") && j["val_loss"].is_number()) s.val_loss = j["val_loss"].get<double>();
    steps.push_back(s);
  }
  return steps;
}

}  // namespace trireme::parallel::testing
