// `trireme env` says what runs and why: the OpenBLAS core trireme chose by re-executing itself (or
// the one the user set), the OpenMP wait policy, the backends built in (Gloo always); and it does
// not list trireme's internal switches as settings.
#include <gtest/gtest.h>

#include "run_command.h"
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "trireme/runtime/cpu_features.h"

namespace {

// Runs `trireme env` with a clean CPU environment plus `vars` ("NAME=value ..."); a re-exec
// loop would hang, so the run is bounded.
// `command` defaults to `trireme env`; the probe (tests/cli/worker/cpu_setup_probe.cpp) runs the
// same re-exec as if OpenBLAS had detected a given core.
std::string env_output(const std::string& vars, int* status = nullptr,
                       const std::string& command = std::string(TRIREME_BINARY) + " env") {
  std::string cmd = "env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u TRIREME_CPU_SETUP " + vars +
                    " timeout 60 " + command;
  const trireme::cli_testing::Result r = trireme::cli_testing::run_command(cmd);
  if (status) *status = r.status;
  return r.out;
}

std::string probe(const std::string& detected) { return std::string(TRIREME_CPU_SETUP_PROBE) + " " + detected; }

std::string line_of(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  if (at == std::string::npos) return "<no " + key + " line>";
  return out.substr(at, out.find('\n', at) - at);
}

}  // namespace

TEST(Env, ReportsGlooAndNoInternalSwitches) {
  int status = -1;
  const std::string out = env_output("", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(line_of(out, "gloo").find("built (Gloo "), std::string::npos) << out;
  for (const char* internal : {"TRIREME_PEER", "TRIREME_GEMM", "TRIREME_CPU_SETUP"}) {
    EXPECT_EQ(out.find(internal), std::string::npos) << internal << "\n" << out;
  }
}

TEST(Env, ReexecutesOnceWithThePassiveWaitPolicy) {
  const std::string out = env_output("");
  EXPECT_NE(line_of(out, "runtime.openmp_wait_policy").find("passive (chosen by trireme"), std::string::npos) << out;
  EXPECT_NE(line_of(out, "runtime.env").find("\"OMP_WAIT_POLICY\":\"passive\""), std::string::npos) << out;
}

TEST(Env, ReexecutesWithTheCoreTheCpuSupportsWhenOpenBlasChoseAWeakerOne) {
  const std::string best = trireme::runtime::best_openblas_core(trireme::runtime::detect_cpu_features());
  if (trireme::runtime::openblas_core_tier(best) == 0) GTEST_SKIP() << "this CPU runs only SSE3 kernels";
  const std::string out = env_output("", nullptr, probe("Prescott"));
  EXPECT_NE(line_of(out, "runtime.openblas_core").find(best + " (chosen by trireme: the CPU has "), std::string::npos)
      << out;
  EXPECT_NE(line_of(out, "runtime.openblas_core").find("OpenBLAS detected Prescott"), std::string::npos) << out;
}

TEST(Env, TheUsersCoreTypeAndWaitPolicyAreRespected) {
  const std::string out = env_output("OPENBLAS_CORETYPE=Prescott OMP_WAIT_POLICY=active", nullptr, probe("Prescott"));
  EXPECT_NE(line_of(out, "runtime.openblas_core").find("Prescott (set by OPENBLAS_CORETYPE)"), std::string::npos)
      << out;
  EXPECT_NE(line_of(out, "runtime.openmp_wait_policy").find("OMP_WAIT_POLICY=active (set in the environment)"),
            std::string::npos)
      << out;
}

TEST(Env, AnInheritedMarkerStopsTheReexec) {
  // A trireme process's children inherit TRIREME_CPU_SETUP: they run as they are, never re-exec.
  int status = -1;
  const std::string out = env_output("TRIREME_CPU_SETUP='core=;detected=;wait='", &status, probe("Prescott"));
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(line_of(out, "runtime.openmp_wait_policy").find("OpenMP's default"), std::string::npos) << out;
}

TEST(Env, NamesTheGemmKernelsAndTheInstructionSetTheyUse) {
  const std::string line = line_of(env_output(""), "runtime.gemm_kernels");
  EXPECT_NE(line.find("oneDNN "), std::string::npos) << line;
  if (line.find("AVX-512") == std::string::npos) GTEST_SKIP() << "no AVX-512 here: " << line;
  // oneDNN's own cap on its instruction set shows in the report.
  const std::string capped = line_of(env_output("ONEDNN_MAX_CPU_ISA=AVX2"), "runtime.gemm_kernels");
  EXPECT_NE(capped.find(", AVX2; bf16 GEMMs convert their inputs to f32"), std::string::npos) << capped;
}
