#include "trireme/runtime/cpu_setup.h"

#include <cblas.h>
#include <strings.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trireme/runtime/cpu_threads.h"

namespace trireme::runtime {
namespace {

bool is_set(const char* v) { return v != nullptr && *v != '\0'; }

// kCpuSetupEnv's "key=value;..." fields.
std::map<std::string, std::string> setup_fields() {
  std::map<std::string, std::string> out;
  const char* s = std::getenv(kCpuSetupEnv);
  if (!s) return out;
  std::string_view rest(s);
  while (!rest.empty()) {
    const size_t end = std::min(rest.find(';'), rest.size());
    const std::string_view field = rest.substr(0, end);
    const size_t eq = field.find('=');
    if (eq != std::string_view::npos) out[std::string(field.substr(0, eq))] = std::string(field.substr(eq + 1));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return out;
}

bool same_core(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

CpuEnvPlan plan_cpu_environment(const CpuFeatures& cpu, std::string_view openblas_core, const GetEnv& getenv) {
  CpuEnvPlan plan;
  if (getenv(kCpuSetupEnv) != nullptr) return plan;  // already re-executed, or a trireme process's child
  std::string core, wait;
  if (!is_set(getenv("OPENBLAS_CORETYPE"))) {
    const std::string best = best_openblas_core(cpu);
    const int have = openblas_core_tier(openblas_core);
    // An unknown name is a core newer than this table: OpenBLAS knows that CPU, leave it.
    if (have >= 0 && have < openblas_core_tier(best)) core = best;
  }
  if (!is_set(getenv("OMP_WAIT_POLICY")) && !is_set(getenv("GOMP_SPINCOUNT"))) wait = kWaitPolicy;
  if (core.empty() && wait.empty()) return plan;
  if (!core.empty()) plan.set.emplace_back("OPENBLAS_CORETYPE", core);
  if (!wait.empty()) plan.set.emplace_back("OMP_WAIT_POLICY", wait);
  plan.set.emplace_back(kCpuSetupEnv, "core=" + core + ";detected=" + std::string(openblas_core) + ";wait=" + wait);
  return plan;
}

void configure_cpu_runtime(char** argv) {
  // An OpenBLAS built for one core ignores OPENBLAS_CORETYPE: an empty name leaves it alone.
  const bool dynamic_arch = std::string_view(openblas_get_config()).find("DYNAMIC_ARCH") != std::string_view::npos;
  configure_cpu_runtime_as_if_detected(argv, dynamic_arch ? openblas_get_corename() : "");
}

void configure_cpu_runtime_as_if_detected(char** argv, const std::string& detected) {
  const CpuEnvPlan plan =
      plan_cpu_environment(detect_cpu_features(), detected, [](const char* v) { return std::getenv(v); });
  if (plan.reexec()) {
    for (const auto& [name, value] : plan.set) ::setenv(name.c_str(), value.c_str(), 1);
    ::execv("/proc/self/exe", argv);
    // No re-exec (no /proc, say): run as we are, and leave the environment as it was, so that
    // `trireme env` and child processes do not claim settings this process does not have.
    for (const auto& [name, value] : plan.set) ::unsetenv(name.c_str());
  }
#ifdef _OPENMP
  // The thread count can change at run time: OpenMP's default counts the affinity mask only.
  if (!is_set(std::getenv("OMP_NUM_THREADS"))) {
    const int cpus = available_cpus();
    if (cpus < omp_get_max_threads()) {
      omp_set_num_threads(cpus);
      openblas_set_num_threads(cpus);
    }
  }
#endif
}

std::string describe_openblas_core() {
  const std::string running = openblas_get_corename();
  const CpuFeatures cpu = detect_cpu_features();
  const std::string best = best_openblas_core(cpu);
  const std::string isa = describe_vector_isa(cpu);
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const auto fields = setup_fields();
  const auto chosen = fields.find("core");
  if (chosen != fields.end() && !chosen->second.empty() && user && chosen->second == user) {
    const std::string detected = fields.count("detected") ? fields.at("detected") : "?";
    if (same_core(running, chosen->second)) {
      return running + " (chosen by trireme: the CPU has " + isa + "; OpenBLAS detected " + detected + ")";
    }
    return running + " (trireme asked for " + chosen->second +
           ", which this OpenBLAS does not run; OpenBLAS detected " + detected + ")";
  }
  if (is_set(user)) {
    if (same_core(running, user)) return running + " (set by OPENBLAS_CORETYPE)";
    return running + " (OPENBLAS_CORETYPE=" + user + " is not a core this OpenBLAS runs on this CPU)";
  }
  const int have = openblas_core_tier(running);
  if (have < 0 || have >= openblas_core_tier(best)) return running + " (OpenBLAS's choice; the CPU has " + isa + ")";
  return running + " (OpenBLAS's choice, weaker than the CPU's " + isa + ": set OPENBLAS_CORETYPE=" + best +
         " or call trireme::runtime::configure_cpu_runtime(argv) first in main)";
}

std::string describe_wait_policy() {
  const auto fields = setup_fields();
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const auto chosen = fields.find("wait");
  if (chosen != fields.end() && !chosen->second.empty() && policy && chosen->second == policy) {
    return std::string(policy) +
           " (chosen by trireme: idle threads sleep, so other work on the machine slows a step in proportion)";
  }
  if (is_set(policy) || is_set(spin)) {
    std::string s;
    if (is_set(policy)) s += std::string("OMP_WAIT_POLICY=") + policy;
    if (is_set(spin)) s += std::string(s.empty() ? "" : ", ") + "GOMP_SPINCOUNT=" + spin;
    return s + " (set in the environment)";
  }
  return "OpenMP's default (idle threads spin before sleeping: set OMP_WAIT_POLICY=passive on a shared machine, "
         "or call trireme::runtime::configure_cpu_runtime(argv) first in main)";
}

}  // namespace trireme::runtime
