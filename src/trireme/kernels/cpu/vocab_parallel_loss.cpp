// CPU kernels of the vocabulary-parallel cross-entropy (see kernels/nn.h): row maxima, row
// statistics and the gradient, each one pass over a rank's (N, V_local) logits, rows in parallel.
#include <cmath>
#include <limits>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/vec_math.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

int64_t target_at(const Tensor& targets, int64_t r) {
  const int64_t st = targets.dim() ? targets.stride(0) : 0;
  return targets.dtype() == DType::i64 ? targets.data<int64_t>()[r * st] : int64_t(targets.data<int32_t>()[r * st]);
}

template <class T>
void row_max_cpu(const Tensor& logits, int64_t real, Tensor& row_max) {
  using A = acc_t<T>;
  const int64_t n = logits.size(0), vl = logits.size(1);
  const T* x = logits.data<T>();
  A* m = row_max.data<A>();
  parallel_for(n, real, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      A best = -std::numeric_limits<A>::infinity();
      for (int64_t j = 0; j < real; ++j) best = std::max(best, A(x[r * vl + j]));
      m[r] = best;
    }
  });
}

template <class T>
void row_stats_cpu(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real, int64_t vocab_size,
                   int64_t ignore_index, const Tensor& row_max, Tensor& stats) {
  using A = acc_t<T>;
  const int64_t n = logits.size(0), vl = logits.size(1);
  for (int64_t r = 0; r < n; ++r) {  // validated serially: no exception may leave a parallel region
    const int64_t t = target_at(targets, r);
    TRIREME_CHECK(t == ignore_index || (t >= 0 && t < vocab_size), "vocab_parallel_cross_entropy: target ", t,
                  " at row ", r, " is outside the vocabulary of ", vocab_size, " (or ignore_index = ", ignore_index, ")");
  }
  const T* x = logits.data<T>();
  const A* m = row_max.data<A>();
  A* sum_exp = stats.data<A>();
  A* target_shifted = sum_exp + n;
  parallel_for(n, 2 * real, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const A mr = std::isinf(m[r]) && m[r] < 0 ? A(0) : m[r];  // an all -inf row: avoid -inf - -inf
      A s = A(0);
      for (int64_t j = 0; j < real; ++j) s += exp_acc(A(x[r * vl + j]) - mr);
      sum_exp[r] = s;
      const int64_t local = target_at(targets, r) - start;
      target_shifted[r] = local >= 0 && local < real ? A(x[r * vl + local]) - mr : A(0);
    }
  });
}

template <class T>
void grad_cpu(const Tensor& logits, const Tensor& targets, int64_t start, int64_t real, const Tensor& lse,
              const Tensor& grad_row, Tensor& grad_logits) {
  using A = acc_t<T>;
  const int64_t n = logits.size(0), vl = logits.size(1);
  const T* x = logits.data<T>();
  const A* l = lse.data<A>();
  const A* g = grad_row.data<A>();
  T* out = grad_logits.data<T>();
  parallel_for(n, 2 * vl, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t local = target_at(targets, r) - start;
      for (int64_t j = 0; j < vl; ++j) {
        A v = A(0);
        if (j < real) v = (exp_acc(A(x[r * vl + j]) - l[r]) - (j == local ? A(1) : A(0))) * g[r];
        out[r * vl + j] = T(v);
      }
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_vocab_parallel_loss) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<VocabRowMaxKernel, double, float, bf16_t, f16_t>("vocab_row_max", cpu,
                                                                     []<class T>() { return &row_max_cpu<T>; });
  registry.add_each<VocabRowStatsKernel, double, float, bf16_t, f16_t>("vocab_row_stats", cpu,
                                                                       []<class T>() { return &row_stats_cpu<T>; });
  registry.add_each<VocabGradKernel, double, float, bf16_t, f16_t>("vocab_grad", cpu,
                                                                   []<class T>() { return &grad_cpu<T>; });
}

}  // namespace trireme::cpu
