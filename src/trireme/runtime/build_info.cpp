// Build and runtime facts for `trireme env`.
#include "trireme/runtime/build_info.h"

#include <cblas.h>
#include <gloo/config.h>  // Gloo is always built in: CMakeLists.txt refuses to configure without it

#include <cstdlib>
#include <string>
#include <vector>

#include "trireme/cuda/device.h"
#include "trireme/runtime/cpu_setup.h"
#include "trireme/runtime/gpu_topology.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef TRIREME_WITH_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#endif
#ifdef TRIREME_WITH_NCCL
#include <nccl.h>
#endif

namespace trireme::runtime {
namespace {

#ifdef TRIREME_WITH_CUDA
// CUDA's integer versions (12040) as "12.4".
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }
#endif

}  // namespace

nlohmann::json build_info() {
  nlohmann::json j;
  j["trireme"] = TRIREME_VERSION;
  j["commit"] = git_commit();
  j["compiler"] = std::string("g++ ") + __VERSION__;
  j["cxx_standard"] = __cplusplus;
#ifdef NDEBUG
  j["build_type"] = "release";
#else
  j["build_type"] = "debug";
#endif
#if defined(__SANITIZE_ADDRESS__)
  j["sanitizers"] = "address,undefined";
#else
  j["sanitizers"] = "none";
#endif
#ifdef TRIREME_WITH_CUDA
  j["cuda"] = "built with CUDA " + cuda_version(CUDART_VERSION);
#else
  j["cuda"] = "not built";
#endif
  j["gloo"] = "built (Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
              std::to_string(GLOO_VERSION_PATCH) + ")";
#ifdef TRIREME_WITH_NCCL
  j["nccl"] = "built with NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
              std::to_string(NCCL_PATCH);
#else
  j["nccl"] = "not built";
#endif
  return j;
}

nlohmann::json runtime_info() {
  nlohmann::json j;
  j["openblas"] = openblas_get_config();
  j["openblas_core"] = describe_openblas_core();
  j["openblas_threads"] = openblas_get_num_threads();
#ifdef _OPENMP
  j["openmp_max_threads"] = omp_get_max_threads();
#endif
  j["openmp_wait_policy"] = describe_wait_policy();
#ifdef TRIREME_WITH_CUDA
  int runtime_version = 0, driver_version = 0;
  j["cuda_runtime"] =
      cudaRuntimeGetVersion(&runtime_version) == cudaSuccess ? cuda_version(runtime_version) : "unavailable";
  j["cuda_driver"] = cudaDriverGetVersion(&driver_version) == cudaSuccess && driver_version > 0
                         ? cuda_version(driver_version)
                         : "no driver";
  const size_t cublaslt = cublasLtGetVersion();
  j["cublaslt"] = std::to_string(cublaslt / 10000) + "." + std::to_string(cublaslt / 100 % 100) + "." +
                  std::to_string(cublaslt % 100);
  const int gpus = cuda::device_count();
  if (gpus == 0) {
    j["gpus"] = "none usable: " + cuda::unavailable_reason();
  } else {
    nlohmann::json list = nlohmann::json::array();
    for (int d = 0; d < gpus; ++d) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
      list.push_back(std::to_string(d) + ": " + p.name + ", " + std::to_string(p.totalGlobalMem >> 20) + " MiB, sm_" +
                     std::to_string(p.major) + std::to_string(p.minor));
    }
    j["gpus"] = list;
  }
#else
  j["gpus"] = "none usable: " + cuda::unavailable_reason();
#endif
  const nlohmann::json topology = gpu_topology();
  if (topology.contains("unavailable")) {
    j["gpu_links"] = topology["unavailable"];
  } else {
    j["gpu_links"] = topology["links"];
    j["gpu_pairs"] = topology["pairs"].empty() ? nlohmann::json("none: one GPU") : topology["pairs"];
  }
#ifdef TRIREME_WITH_NCCL
  int nccl = 0;
  j["nccl"] =
      ncclGetVersion(&nccl) == ncclSuccess
          ? std::to_string(nccl / 10000) + "." + std::to_string(nccl / 100 % 100) + "." + std::to_string(nccl % 100)
          : "unavailable";
#endif
  // Only the standard variables that change threads and devices: settings users are meant to use.
  std::vector<const char*> vars = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OMP_WAIT_POLICY"};
#ifdef TRIREME_WITH_CUDA
  vars.push_back("CUDA_VISIBLE_DEVICES");
#endif
#ifdef TRIREME_WITH_NCCL
  vars.push_back("NCCL_NVLS_ENABLE");
#endif
  for (const char* v : vars) {
    const char* s = std::getenv(v);
    j["env"][v] = s ? s : "";
  }
  return j;
}

}  // namespace trireme::runtime
