// What the Slurm and restart tests share: running a shell command with its output captured, and
// comparing a run's per-step losses with a reference run's.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "parallel_cli.h"

namespace trireme::slurm_testing {

using trireme::parallel::testing::Result;
using trireme::parallel::testing::Step;

// Runs `command` with /bin/sh, stdout and stderr captured together.
inline Result run_shell(const std::string& command) {
  Result r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Every step's loss (and validation loss, where there is one) within 1e-4 relative of the reference's.
inline void expect_same_losses(const std::vector<Step>& ref, const std::vector<Step>& got, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LT(std::abs(got[i].loss - ref[i].loss), 1e-4 * ref[i].loss)
        << what << " step " << i + 1 << ": " << got[i].loss << " vs " << ref[i].loss;
    EXPECT_EQ(std::isnan(got[i].val_loss), std::isnan(ref[i].val_loss)) << what << " step " << i + 1;
    if (!std::isnan(ref[i].val_loss)) {
      EXPECT_LT(std::abs(got[i].val_loss - ref[i].val_loss), 1e-4 * ref[i].val_loss) << what << " step " << i + 1;
    }
  }
}

}  // namespace trireme::slurm_testing
