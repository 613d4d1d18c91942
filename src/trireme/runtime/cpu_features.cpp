#include "trireme/runtime/cpu_features.h"

#include <strings.h>

#include <cstdint>
#include <cstring>
#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace trireme::runtime {
namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}
#endif

bool has(uint32_t reg, int bit) { return (reg >> bit) & 1u; }

}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const uint32_t max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;

  __get_cpuid(1, &a, &b, &c, &d);
  f.sse3 = has(c, 0);
  f.sse4_2 = has(c, 20);
  const bool fma = has(c, 12), avx = has(c, 28), osxsave = has(c, 27);
  // Wide registers are usable only when the OS saves them: XCR0 bits 1-2 (SSE, YMM) and 5-7
  // (AVX-512 mask and ZMM). A hypervisor can hide them even when cpuid lists the instructions.
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
  f.avx = avx && os_ymm;
  f.fma = fma && f.avx;
  if (max_leaf >= 7) {
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    f.avx2 = has(b, 5) && f.avx;
    f.avx512f = has(b, 16) && os_zmm;
    f.avx512dq = has(b, 17) && os_zmm;
    f.avx512cd = has(b, 28) && os_zmm;
    f.avx512bw = has(b, 30) && os_zmm;
    f.avx512vl = has(b, 31) && os_zmm;
    f.amx_tile = has(d, 24);
    const uint32_t subleaves = a;
    if (subleaves >= 1) {
      __get_cpuid_count(7, 1, &a, &b, &c, &d);
      f.avx512_bf16 = has(a, 5) && os_zmm;
    }
  }
#endif
  return f;
}

int openblas_core_tier(std::string_view core) {
  struct Entry {
    const char* name;
    int tier;
  };
  // OpenBLAS 0.3.x's x86-64 core names (its DYNAMIC_ARCH list) and the kernels each runs.
  static constexpr Entry kCores[] = {
      {"Katmai", 0},         {"Coppermine", 0},   {"Northwood", 0},  {"Prescott", 0},   {"Banias", 0},
      {"Core2", 0},          {"Penryn", 0},       {"Dunnington", 0}, {"Atom", 0},       {"Athlon", 0},
      {"Opteron", 0},        {"Opteron_SSE3", 0}, {"Barcelona", 0},  {"Nano", 0},       {"Bobcat", 0},
      {"Nehalem", 1},        {"Sandybridge", 2},  {"Bulldozer", 2},  {"Piledriver", 2}, {"Steamroller", 2},
      {"Excavator", 2},      {"Haswell", 3},      {"Zen", 3},        {"SkylakeX", 4},   {"Cooperlake", 4},
      {"SapphireRapids", 4},
  };
  for (const Entry& e : kCores) {
    if (core.size() == std::strlen(e.name) && ::strncasecmp(core.data(), e.name, core.size()) == 0) return e.tier;
  }
  return -1;
}

std::string best_openblas_core(const CpuFeatures& cpu) {
  const bool avx512 = cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  if (avx512) return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (cpu.avx2 && cpu.fma) return cpu.vendor == "AuthenticAMD" || cpu.vendor == "HygonGenuine" ? "Zen" : "Haswell";
  if (cpu.avx) return "Sandybridge";
  if (cpu.sse4_2) return "Nehalem";
  return "Prescott";
}

std::string describe_vector_isa(const CpuFeatures& cpu) {
  const bool avx512 = cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq;
  if (avx512) return cpu.avx512_bf16 ? "AVX-512 with BF16" : "AVX-512";
  if (cpu.avx2 && cpu.fma) return "AVX2 and FMA";
  if (cpu.avx) return "AVX";
  if (cpu.sse4_2) return "SSE4.2";
  return cpu.sse3 ? "SSE3" : "SSE2";
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace trireme::runtime
