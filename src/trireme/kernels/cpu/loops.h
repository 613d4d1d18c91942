// Strided loops for CPU kernels: coalesce dimensions, then hand rows (or stretches of rows) to an
// inner function, in parallel (OpenMP) when the tensor is large. Each output element is computed
// by exactly one thread, so results do not depend on the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "trireme/core/tensor.h"

namespace trireme::cpu {

// Below this many elements a loop runs on one thread: spawning costs more than it saves.
inline constexpr int64_t kParallelGrain = 32768;

int num_threads();  // OpenMP's max threads (1 when built without OpenMP)

// One operand of a strided loop: its base pointer (offset applied) and strides in elements
// over the loop's shape (0 for broadcast dimensions).
struct LoopOperand {
  char* base;
  Shape strides;
  int64_t elem_size;
};

inline LoopOperand loop_operand(const Tensor& t) {
  return {static_cast<char*>(t.data_ptr()), t.strides(), int64_t(t.element_size())};
}

// Runs body(thread, threads) once on every thread of an OpenMP team (once, as 0 of 1, without OpenMP).
template <class Body>
void on_each_thread(Body&& body) {
#pragma omp parallel
  {
    int tid = 0, nt = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    nt = omp_get_num_threads();
#endif
    body(tid, nt);
  }
}

// Calls row(ptrs, byte_strides, n) for every row of `shape` after coalescing: ptrs[k] points at
// the row's first element of operand k, byte_strides[k] steps along the row.
template <size_t N, class Row>
void for_each_row(const Shape& shape, const std::array<LoopOperand, N>& ops, Row&& row) {
  // Coalesce: drop size-1 dims; merge dim i into i+1 when every operand is contiguous across them.
  Shape sizes;
  std::array<Shape, N> strides;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sizes.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = strides[k].back() == ops[k].strides[d] * shape[d];
    if (merge) {
      sizes.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) strides[k].back() = ops[k].strides[d];
    } else {
      sizes.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) strides[k].push_back(ops[k].strides[d]);
    }
  }
  for (int64_t s : shape) {
    if (s == 0) return;
  }
  if (sizes.empty()) {  // a single element
    sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) strides[k].push_back(0);
  }
  const size_t nd = sizes.size();
  const int64_t inner = sizes[nd - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= sizes[d];
  std::array<int64_t, N> inner_bytes;
  for (size_t k = 0; k < N; ++k) inner_bytes[k] = strides[k][nd - 1] * ops[k].elem_size;

  // The pointers to row r's first element, one per operand.
  auto row_ptrs = [&](int64_t r) {
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) ptrs[k] = ops[k].base;
    for (size_t d = nd - 1; d-- > 0;) {
      int64_t i = r % sizes[d];
      r /= sizes[d];
      for (size_t k = 0; k < N; ++k) ptrs[k] += i * strides[k][d] * ops[k].elem_size;
    }
    return ptrs;
  };
  auto run_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::array<char*, N> ptrs = row_ptrs(r);
      row(ptrs, inner_bytes, inner);
    }
  };
  const int threads = num_threads();
  if (rows * inner < kParallelGrain || threads == 1) {
    run_rows(0, rows);
    return;
  }
  if (rows < threads) {
    // Fewer rows than threads (a contiguous tensor is one row): each thread takes the same
    // stretch of every row, in pieces of whole cache lines.
    on_each_thread([&](int tid, int nt) {
      const int64_t piece = ((inner + nt - 1) / nt + 15) / 16 * 16;
      const int64_t b = std::min(inner, tid * piece), e = std::min(inner, b + piece);
      for (int64_t r = 0; r < rows && b < e; ++r) {
        std::array<char*, N> ptrs = row_ptrs(r);
        for (size_t k = 0; k < N; ++k) ptrs[k] += b * inner_bytes[k];
        row(ptrs, inner_bytes, e - b);
      }
    });
    return;
  }
  on_each_thread([&](int tid, int nt) {
    const int64_t chunk = (rows + nt - 1) / nt;
    const int64_t b = tid * chunk, e = std::min(rows, b + chunk);
    if (b < e) run_rows(b, e);
  });
}

// Runs body(begin, end) over [0, n) split among threads when n * cost_per_item is large.
// Use for kernels whose items are independent (rows of a softmax, tokens of an embedding).
template <class Body>
void parallel_for(int64_t n, int64_t cost_per_item, Body&& body) {
  if (n <= 0) return;
  if (n * cost_per_item < kParallelGrain || n == 1 || num_threads() == 1) {
    body(int64_t(0), n);
    return;
  }
  on_each_thread([&](int tid, int nt) {
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = tid * chunk, e = std::min(n, b + chunk);
    if (b < e) body(b, e);
  });
}

}  // namespace trireme::cpu
