// CPU cross-entropy: fused log-softmax + NLL per row of contiguous (N, C) logits, and its
// backward. Rows run in parallel; each row is read twice forward (max, then Σ exp) and once
// backward, with no (N, C) temporaries.
#include <cmath>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/vec_math.h"
#include "trireme/kernels/nn.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Targets as i64 whatever their dtype (i64 or i32) and stride.
std::vector<int64_t> read_targets(const Tensor& targets) {
  const int64_t n = targets.numel(), st = targets.dim() ? targets.stride(0) : 0;
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (targets.dtype() == DType::i64) {
    const int64_t* p = targets.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = p[i * st];
  } else {
    TRIREME_CHECK(targets.dtype() == DType::i32, "cross_entropy: targets must be i64 or i32, got ", targets.dtype());
    const int32_t* p = targets.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = p[i * st];
  }
  return out;
}

template <class T>
void cross_entropy_cpu(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& losses,
                       Tensor& lse, Tensor& count_out) {
  using A = acc_t<T>;
  const int64_t n = logits.size(0), c = logits.size(1);
  const auto tgt = read_targets(targets);
  // Validate (serially: an exception must not escape an OpenMP region) and count the rows used.
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = tgt[size_t(r)];
    if (t == ignore_index) continue;
    TRIREME_CHECK(t >= 0 && t < c, "cross_entropy: target ", t, " at row ", r, " is out of range for ", c,
                  " classes (expected 0 <= target < ", c, ", or ignore_index = ", ignore_index, ")");
    ++count;
  }
  const T* px = logits.data<T>();
  A* pl = losses.data<A>();
  A* plse = lse.data<A>();
  parallel_for(n, 4 * c, [&](int64_t r0, int64_t r1) {
    std::vector<A> e(static_cast<size_t>(c));
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = px + r * c;
      A m = row_max<A>(xr, c);
      if (std::isinf(m) && m < 0) m = A(0);  // an all -inf row: avoid -inf - -inf
      // exp into a buffer, then sum: a loop doing both does not vectorise.
      for (int64_t j = 0; j < c; ++j) e[size_t(j)] = exp_acc(A(xr[j]) - m);
      const A log_s = A(std::log(row_sum(e.data(), c)));
      plse[r] = m + log_s;
      const int64_t t = tgt[size_t(r)];
      // (m - x_t) + log s keeps the bits that m + log s would round away when |m| is large.
      pl[r] = t == ignore_index ? A(0) : (m - A(xr[t])) + log_s;
    }
  });
  count_out.data<A>()[0] = A(count);
}

template <class T>
void cross_entropy_backward_cpu(const Tensor& logits, const Tensor& targets, const Tensor& lse, const Tensor& grad,
                                int64_t ignore_index, Tensor& grad_logits) {
  using A = acc_t<T>;
  const int64_t n = logits.size(0), c = logits.size(1);
  const auto tgt = read_targets(targets);
  const T* px = logits.data<T>();
  const A* plse = lse.data<A>();
  const A* pg = grad.data<A>();
  const int64_t gs = grad.dim() ? grad.stride(0) : 0;
  T* out = grad_logits.data<T>();
  parallel_for(n, 2 * c, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* orow = out + r * c;
      const int64_t t = tgt[size_t(r)];
      if (t == ignore_index) {
        for (int64_t j = 0; j < c; ++j) orow[j] = T(A(0));
        continue;
      }
      const T* xr = px + r * c;
      const A l = plse[r], g = pg[r * gs];
      const A xt = A(xr[t]);  // read before the row is written: grad_logits may be logits' memory
      for (int64_t j = 0; j < c; ++j) orow[j] = T(exp_acc(A(xr[j]) - l) * g);
      orow[t] = T((exp_acc(xt - l) - A(1)) * g);  // in A: p - 1 loses bits once rounded to T
    }
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_loss) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<CrossEntropyKernel, double, float, bf16_t, f16_t>(
      "cross_entropy", cpu, []<class T>() { return &cross_entropy_cpu<T>; });
  registry.add_each<CrossEntropyBackwardKernel, double, float, bf16_t, f16_t>(
      "cross_entropy_backward", cpu, []<class T>() { return &cross_entropy_backward_cpu<T>; });
}

}  // namespace trireme::cpu
