// Row-major GEMMs of f32 and bf16 inputs through oneDNN's matmul, accumulated and written in f32.
// oneDNN generates its kernels for the CPU it runs on at run time: AVX-512 or AVX2 for f32, and
// on CPUs with AMX the tile units for bf16 (4-10x the f32 rate on the tiny GPT's shapes, measured
// in docs/CPU.md). f64 stays with OpenBLAS (oneDNN has no f64).
#pragma once

#include <cstdint>
#include <string>

namespace trireme::cpu {

enum class GemmType { f32, bf16 };

// One operand: rows x cols of the product, stored row-major at `ptr` with leading dimension
// `ld`, or (trans) stored as its transpose (cols x rows, leading dimension ld).
struct GemmOperand {
  const void* ptr;
  bool trans;
  int64_t ld;
};

// c (m x n of type `output`, leading dimension ldc) = a (m x k) · b (k x n) of type `input`
// [+ bias (n values of type `output`, `bias_stride` apart) on every row], or, when
// `accumulate`, c += a · b. Accumulates in f32 and rounds to `output` once. k > 0.
// Primitives are built once per type, shape, layout and OpenMP thread count, and kept.
void onednn_gemm(GemmType input, GemmOperand a, GemmOperand b, GemmType output, void* c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k, const void* bias, int64_t bias_stride, bool accumulate);

// Whether oneDNN has bf16 GEMMs on this CPU (it needs AVX-512; see ONEDNN_MAX_CPU_ISA). Without
// them, callers convert bf16 to f32 first.
bool onednn_has_bf16_gemm();

// For `trireme env`: oneDNN's version and the instruction set its kernels use on this CPU, e.g.
// "oneDNN 2.6.3, AVX-512 with AMX (bf16 GEMMs on AMX tiles)".
std::string describe_gemm_kernels();

}  // namespace trireme::cpu
