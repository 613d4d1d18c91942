// Makes the CPU libraries run the kernels and the waiting behaviour this machine needs. Two
// settings can only be chosen before the libraries initialise, which happens in load-time
// constructors, before main():
//   - OPENBLAS_CORETYPE: OpenBLAS picks its kernels from the CPU's model number and falls back to
//     SSE3 ("Prescott") on models it does not know (virtualised Xeons among them), 3-4x slower
//     than the AVX-512 kernels the CPU can run. Set when OpenBLAS's own choice is weaker than
//     what the CPU supports (cpu_features.h).
//   - OMP_WAIT_POLICY: libgomp's idle threads spin by default; on a machine whose cores other
//     processes also use, spinning threads take the time the threads doing work need, and a step
//     gets several times slower instead of proportionally slower. See kWaitPolicy.
// configure_cpu_runtime() sets what the user has not set and re-executes the program once
// (guarded by kCpuSetupEnv, which child processes inherit, so they never re-execute).
//
// Library users: call trireme::runtime::configure_cpu_runtime(argv) first thing in main(), or
// set OPENBLAS_CORETYPE (`trireme env` names the core for this CPU) and OMP_WAIT_POLICY=passive
// in the environment of the program. Variables the user set are always respected.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trireme/runtime/cpu_features.h"

namespace trireme::runtime {

// Set in the re-executed process (and inherited by its children): "core=X;detected=Y;wait=Z",
// what trireme chose (empty when it left a setting alone) and what OpenBLAS chose by itself.
inline constexpr const char* kCpuSetupEnv = "TRIREME_CPU_SETUP";
// The OpenMP wait policy trireme sets when the user has set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT: idle threads sleep at once, so a busy machine costs in proportion to the load.
inline constexpr const char* kWaitPolicy = "passive";

using GetEnv = std::function<const char*(const char*)>;

struct CpuEnvPlan {
  std::vector<std::pair<std::string, std::string>> set;  // variables to set before re-executing
  bool reexec() const { return !set.empty(); }
};

// What to set, given the CPU, the core OpenBLAS chose by itself and the environment. Empty when
// kCpuSetupEnv is already set (never a second re-exec) or when nothing needs changing.
CpuEnvPlan plan_cpu_environment(const CpuFeatures& cpu, std::string_view openblas_core, const GetEnv& getenv);

// Applies plan_cpu_environment to this process: sets the variables and re-executes
// /proc/self/exe with the same arguments. In the process that goes on (nothing to change, or the
// re-exec failed) it caps the default thread count at available_cpus() (cpu_threads.h) unless
// OMP_NUM_THREADS is set. argv must be main's, null-terminated.
void configure_cpu_runtime(char** argv);
// The same with `detected` as the core OpenBLAS chose by itself: a test seam, so that a test
// program can exercise the real re-exec on a machine whose OpenBLAS knows its CPU.
void configure_cpu_runtime_as_if_detected(char** argv, const std::string& detected);

// For `trireme env`: the core OpenBLAS runs and why ("SkylakeX (chosen by trireme: ...)"), and
// the OpenMP wait policy in force and who chose it.
std::string describe_openblas_core();
std::string describe_wait_policy();

}  // namespace trireme::runtime
