// Choosing OpenBLAS's core type from the CPU's features, and the environment trireme sets before
// re-executing itself: a weaker OpenBLAS choice is replaced, the user's choice never is, and a
// re-executed process never re-executes again.
#include "trireme/runtime/cpu_features.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trireme/runtime/cpu_setup.h"
#include "trireme/runtime/cpu_threads.h"

using namespace trireme::runtime;

namespace {

CpuFeatures avx512(bool bf16) {
  CpuFeatures f;
  f.vendor = "GenuineIntel";
  f.sse3 = f.sse4_2 = f.avx = f.avx2 = f.fma = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512cd = true;
  f.avx512_bf16 = bf16;
  return f;
}

CpuFeatures avx2(const char* vendor) {
  CpuFeatures f;
  f.vendor = vendor;
  f.sse3 = f.sse4_2 = f.avx = f.avx2 = f.fma = true;
  return f;
}

GetEnv env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string value_of(const CpuEnvPlan& plan, const std::string& name) {
  for (const auto& [n, v] : plan.set) {
    if (n == name) return v;
  }
  return "<unset>";
}

}  // namespace

TEST(CpuFeatures, BestCoreFollowsTheWidestVectorUnits) {
  EXPECT_EQ(best_openblas_core(avx512(false)), "SkylakeX");
  EXPECT_EQ(best_openblas_core(avx512(true)), "Cooperlake");
  EXPECT_EQ(best_openblas_core(avx2("GenuineIntel")), "Haswell");
  EXPECT_EQ(best_openblas_core(avx2("AuthenticAMD")), "Zen");
  CpuFeatures partial = avx512(false);
  partial.avx512bw = false;  // AVX-512 without BW (Knights Landing): SkylakeX's kernels would fault
  EXPECT_EQ(best_openblas_core(partial), "Haswell");
  CpuFeatures old;
  old.sse3 = true;
  EXPECT_EQ(best_openblas_core(old), "Prescott");
  EXPECT_EQ(describe_vector_isa(avx512(true)), "AVX-512 with BF16");
}

TEST(CpuFeatures, CoreTiersIgnoreCaseAndLeaveUnknownNamesAlone) {
  EXPECT_EQ(openblas_core_tier("Prescott"), 0);
  EXPECT_EQ(openblas_core_tier("HASWELL"), 3);
  EXPECT_EQ(openblas_core_tier("skylakex"), 4);
  EXPECT_EQ(openblas_core_tier("Cooperlake"), openblas_core_tier("SkylakeX"));
  EXPECT_EQ(openblas_core_tier("Zen5"), -1);
}

TEST(CpuFeatures, DetectionAgreesWithTheCompilersRuntimeChecks) {
  const CpuFeatures f = detect_cpu_features();
  __builtin_cpu_init();
  EXPECT_EQ(f.avx2, bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(f.fma, bool(__builtin_cpu_supports("fma")));
  EXPECT_EQ(f.avx512f, bool(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(f.avx512bw, bool(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(f.avx512vl, bool(__builtin_cpu_supports("avx512vl")));
  EXPECT_EQ(f.avx512dq, bool(__builtin_cpu_supports("avx512dq")));
}

TEST(CpuSetup, AWeakerOpenBlasChoiceIsReplacedOnce) {
  const CpuEnvPlan plan = plan_cpu_environment(avx512(false), "Prescott", env_of({}));
  ASSERT_TRUE(plan.reexec());
  EXPECT_EQ(value_of(plan, "OPENBLAS_CORETYPE"), "SkylakeX");
  EXPECT_EQ(value_of(plan, "OMP_WAIT_POLICY"), kWaitPolicy);
  EXPECT_EQ(value_of(plan, kCpuSetupEnv), std::string("core=SkylakeX;detected=Prescott;wait=") + kWaitPolicy);
}

TEST(CpuSetup, AnEquallyWideOpenBlasChoiceIsKept) {
  // SkylakeX and Cooperlake run the same f32 kernels: no re-exec for the core alone.
  const CpuEnvPlan plan = plan_cpu_environment(avx512(true), "SkylakeX", env_of({{"OMP_WAIT_POLICY", "active"}}));
  EXPECT_FALSE(plan.reexec());
  EXPECT_FALSE(plan_cpu_environment(avx512(true), "SomeFutureCore", env_of({{"GOMP_SPINCOUNT", "1000"}})).reexec());
}

TEST(CpuSetup, TheUsersSettingsAreRespected) {
  const CpuEnvPlan plan = plan_cpu_environment(
      avx512(false), "Prescott", env_of({{"OPENBLAS_CORETYPE", "Haswell"}, {"OMP_WAIT_POLICY", "active"}}));
  EXPECT_FALSE(plan.reexec());
  const CpuEnvPlan wait_only =
      plan_cpu_environment(avx512(false), "Prescott", env_of({{"OPENBLAS_CORETYPE", "Prescott"}}));
  EXPECT_EQ(value_of(wait_only, "OPENBLAS_CORETYPE"), "<unset>");
  EXPECT_EQ(value_of(wait_only, "OMP_WAIT_POLICY"), kWaitPolicy);
}

TEST(CpuSetup, AReexecutedProcessNeverReexecutesAgain) {
  // Whatever the marker says, and even if OpenBLAS ignored the core asked for.
  EXPECT_FALSE(
      plan_cpu_environment(avx512(false), "Prescott", env_of({{kCpuSetupEnv, "core=SkylakeX;detected=Prescott;wait="}}))
          .reexec());
  EXPECT_FALSE(plan_cpu_environment(avx512(false), "Prescott", env_of({{kCpuSetupEnv, ""}})).reexec());
}

TEST(CpuThreads, ACgroupQuotaCapsTheThreadCount) {
  EXPECT_EQ(cpus_from_cpu_max("max 100000"), 0);
  EXPECT_EQ(cpus_from_cpu_max("200000 100000"), 2);
  EXPECT_EQ(cpus_from_cpu_max("150000 100000"), 1);  // 1.5 CPUs: one thread, never throttled
  EXPECT_EQ(cpus_from_cpu_max("50000 100000"), 1);
  EXPECT_EQ(cpus_from_cpu_max("garbage"), 0);
  EXPECT_EQ(cpus_from_quota(-1, 100000), 0);  // cgroup v1: no quota
  EXPECT_GE(available_cpus(), 1);
}

TEST(CpuSetup, NoCoreIsChosenWhenOpenBlasCannotSwitch) {
  // configure_cpu_runtime passes "" for an OpenBLAS built without DYNAMIC_ARCH.
  const CpuEnvPlan plan = plan_cpu_environment(avx512(false), "", env_of({}));
  EXPECT_EQ(value_of(plan, "OPENBLAS_CORETYPE"), "<unset>");
}
