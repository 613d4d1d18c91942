// What the CPU can run (from cpuid, checked against what the OS saves on a context switch) and
// which OpenBLAS core type uses it best. OpenBLAS picks its core from the CPU's model number and
// falls back to its SSE3 kernels ("Prescott") on models it does not know, such as virtualised
// Xeons that report a generic name; the features say what the hardware really supports.
#pragma once

#include <string>
#include <string_view>

namespace trireme::runtime {

struct CpuFeatures {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  bool sse3 = false;
  bool sse4_2 = false;
  bool avx = false;  // with the OS saving the YMM registers
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;  // the AVX-512 flags only with the OS saving the ZMM and mask registers
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512cd = false;
  bool avx512_bf16 = false;
  bool amx_tile = false;
};

CpuFeatures detect_cpu_features();  // this machine's CPU
// The CPU's model name as /proc/cpuinfo gives it ("unknown" where it gives none).
std::string cpu_model_name();

// The widest vector instruction set an OpenBLAS core type's kernels use, as a rank: 0 SSE2/SSE3,
// 1 SSE4.2, 2 AVX, 3 AVX2+FMA, 4 AVX-512. -1 for a name this table does not know (a newer core).
int openblas_core_tier(std::string_view core);

// The OpenBLAS core type (an OPENBLAS_CORETYPE value) whose kernels use the most of `cpu`:
// avx512f/bw/vl/dq -> SkylakeX, with avx512_bf16 -> Cooperlake, avx2+fma -> Haswell (Zen on AMD),
// avx -> Sandybridge, sse4.2 -> Nehalem, else Prescott.
std::string best_openblas_core(const CpuFeatures& cpu);

// The features behind best_openblas_core, in words: "AVX-512 with BF16", "AVX2 and FMA", ...
std::string describe_vector_isa(const CpuFeatures& cpu);

}  // namespace trireme::runtime
