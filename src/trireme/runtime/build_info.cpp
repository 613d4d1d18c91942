// Build and runtime facts for `trireme env`.
#include "trireme/runtime/build_info.h"

#include <cblas.h>

#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace trireme::runtime {

nlohmann::json build_info() {
  nlohmann::json j;
  j["trireme"] = TRIREME_VERSION;
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
  j["cuda"] = "built";
#else
  j["cuda"] = "not built";
#endif
#ifdef TRIREME_WITH_GLOO
  j["gloo"] = "built";
#else
  j["gloo"] = "not built";
#endif
#ifdef TRIREME_WITH_NCCL
  j["nccl"] = "built";
#else
  j["nccl"] = "not built";
#endif
  return j;
}

nlohmann::json runtime_info() {
  nlohmann::json j;
  j["openblas"] = openblas_get_config();
  j["openblas_threads"] = openblas_get_num_threads();
#ifdef _OPENMP
  j["openmp_max_threads"] = omp_get_max_threads();
#endif
  // The variables that change how a run computes or communicates (TRIREME_PEER_*: Note [peer
  // all-reduce], dist/peer_all_reduce.h; TRIREME_GEMM_SM_CARVEOUT: Note [GEMM SM carveout]).
  for (const char* v : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE",
                        "TRIREME_PEER_ALLREDUCE", "TRIREME_PEER_ALLREDUCE_MB", "TRIREME_PEER_RS_AG",
                        "TRIREME_GEMM_SM_CARVEOUT"}) {
    const char* s = std::getenv(v);
    j["env"][v] = s ? s : "";
  }
  return j;
}

}  // namespace trireme::runtime
