// CPU reductions. Sums accumulate in double whatever the dtype, so f32 sums of many terms
// stay accurate; each output is summed by one thread in a fixed order (deterministic).
#include <algorithm>
#include <vector>

#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"

namespace trireme::cpu {
namespace {

// Splits in's dims into kept (out size > 1 or equal) and reduced (out size 1, in size > 1).
struct ReducePlan {
  Shape kept_sizes, kept_in_strides, kept_out_strides;
  Shape red_sizes, red_strides;
  int64_t num_out = 1, num_red = 1;
};

ReducePlan plan_reduce(const Tensor& in, const Tensor& out) {
  ReducePlan p;
  for (int64_t d = 0; d < in.dim(); ++d) {
    int64_t s = in.sizes()[size_t(d)];
    if (out.sizes()[size_t(d)] == 1 && s != 1) {
      p.red_sizes.push_back(s);
      p.red_strides.push_back(in.strides()[size_t(d)]);
      p.num_red *= s;
    } else if (s != 1) {
      p.kept_sizes.push_back(s);
      p.kept_in_strides.push_back(in.strides()[size_t(d)]);
      p.kept_out_strides.push_back(out.strides()[size_t(d)]);
      p.num_out *= s;
    }
  }
  return p;
}

// Offsets of element `linear` of a row-major iteration over `sizes` with two stride sets.
inline void unravel(int64_t linear, const Shape& sizes, const Shape& s1, const Shape& s2, int64_t& o1, int64_t& o2) {
  o1 = o2 = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    int64_t i = linear % sizes[d];
    linear /= sizes[d];
    o1 += i * s1[d];
    if (!s2.empty()) o2 += i * s2[d];
  }
}

template <class T>
void sum_cpu(const Tensor& in, Tensor& out) {
  const ReducePlan p = plan_reduce(in, out);
  const T* x = in.data<T>();
  T* o = out.data<T>();
  const Shape none;
  // Leading dims reduced over a contiguous input with contiguous kept dims (bias gradients):
  // add whole rows into a row of accumulators.
  bool leading = in.is_contiguous() && out.is_contiguous() && p.num_red > 1;
  if (leading) {
    int64_t d = 0;
    while (d < in.dim() && out.sizes()[size_t(d)] == 1) ++d;
    for (int64_t e = d; e < in.dim(); ++e) leading = leading && out.sizes()[size_t(e)] == in.sizes()[size_t(e)];
  }
  if (leading) {
    const int64_t rows = p.num_red, cols = p.num_out;
    parallel_for(cols, rows, [&](int64_t c0, int64_t c1) {
      std::vector<double> acc(size_t(c1 - c0), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * cols;
        for (int64_t c = c0; c < c1; ++c) acc[size_t(c - c0)] += double(acc_t<T>(row[c]));
      }
      for (int64_t c = c0; c < c1; ++c) o[c] = T(acc_t<T>(acc[size_t(c - c0)]));
    });
    return;
  }
  const bool inner_contig = p.red_sizes.size() == 1 && p.red_strides[0] == 1;
  parallel_for(p.num_out, p.num_red, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t in_off, out_off;
      unravel(i, p.kept_sizes, p.kept_in_strides, p.kept_out_strides, in_off, out_off);
      double acc = 0.0;
      if (inner_contig) {
        const T* row = x + in_off;
        for (int64_t r = 0; r < p.num_red; ++r) acc += double(acc_t<T>(row[r]));
      } else {
        for (int64_t r = 0; r < p.num_red; ++r) {
          int64_t roff, unused;
          unravel(r, p.red_sizes, p.red_strides, none, roff, unused);
          acc += double(acc_t<T>(x[in_off + roff]));
        }
      }
      o[out_off] = T(acc_t<T>(acc));
    }
  });
}

// Blocks of kSquaresBlock elements summed in parallel, then the blocks' sums in order: the same
// bits for any number of threads. The blocks of many tensors run in one parallel loop.
constexpr int64_t kSquaresBlock = 1 << 16;

template <class T>
double block_squares(const T* x, int64_t begin, int64_t end) {
  double acc = 0.0;
  for (int64_t i = begin; i < end; ++i) {
    const double v = double(acc_t<T>(x[i]));
    acc += v * v;
  }
  return acc;
}

template <class T>
void sum_squares_many_cpu(std::span<const Tensor* const> ins, Tensor& out) {
  std::vector<int64_t> first_block(ins.size() + 1, 0);  // tensor k's blocks: [first_block[k], first_block[k + 1])
  for (size_t k = 0; k < ins.size(); ++k) {
    first_block[k + 1] = first_block[k] + (ins[k]->numel() + kSquaresBlock - 1) / kSquaresBlock;
  }
  std::vector<double> block_sums(size_t(first_block.back()), 0.0);
  parallel_for(first_block.back(), kSquaresBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const size_t k = size_t(std::upper_bound(first_block.begin(), first_block.end(), b) - first_block.begin() - 1);
      const int64_t begin = (b - first_block[k]) * kSquaresBlock, n = ins[k]->numel();
      block_sums[size_t(b)] = block_squares(ins[k]->data<T>(), begin, std::min(n, begin + kSquaresBlock));
    }
  });
  double total = 0.0;
  for (size_t k = 0; k < ins.size(); ++k) {
    double tensor_total = 0.0;
    for (int64_t b = first_block[k]; b < first_block[k + 1]; ++b) tensor_total += block_sums[size_t(b)];
    total += tensor_total;
  }
  *out.data<double>() = total;
}

template <class T>
void sum_squares_cpu(const Tensor& in, Tensor& out) {
  const Tensor* ins[] = {&in};
  sum_squares_many_cpu<T>(ins, out);
}

template <class T>
void max_dim_cpu(const Tensor& in, int64_t dim, Tensor& values, Tensor& indices) {
  const int64_t n = in.sizes()[size_t(dim)], stride = in.strides()[size_t(dim)];
  Shape outer_sizes, in_strides, val_strides, idx_strides;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d == dim) continue;
    outer_sizes.push_back(in.sizes()[size_t(d)]);
    in_strides.push_back(in.strides()[size_t(d)]);
    val_strides.push_back(values.strides()[size_t(d)]);
    idx_strides.push_back(indices.strides()[size_t(d)]);
  }
  const T* x = in.data<T>();
  T* v = values.data<T>();
  int64_t* ix = indices.data<int64_t>();
  const int64_t outer = shape_numel(outer_sizes);
  parallel_for(outer, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      int64_t in_off, v_off, i_off, unused;
      unravel(i, outer_sizes, in_strides, val_strides, in_off, v_off);
      unravel(i, outer_sizes, idx_strides, Shape(), i_off, unused);
      acc_t<T> best = acc_t<T>(x[in_off]);
      int64_t best_j = 0;
      for (int64_t j = 1; j < n; ++j) {
        acc_t<T> val = acc_t<T>(x[in_off + j * stride]);
        if (val > best || (val != val && best == best)) {  // NaN propagates, like PyTorch
          best = val;
          best_j = j;
        }
      }
      v[v_off] = T(best);
      ix[i_off] = best_j;
    }
  });
}

template <class T>
void max_backward_cpu(const Tensor& grad, const Tensor& indices, int64_t dim, Tensor& grad_in) {
  Shape outer_sizes, g_strides, i_strides, gi_strides;
  for (int64_t d = 0; d < grad_in.dim(); ++d) {
    if (d == dim) continue;
    outer_sizes.push_back(grad_in.sizes()[size_t(d)]);
    g_strides.push_back(grad.strides()[size_t(d)]);
    i_strides.push_back(indices.strides()[size_t(d)]);
    gi_strides.push_back(grad_in.strides()[size_t(d)]);
  }
  const T* g = grad.data<T>();
  const int64_t* ix = indices.data<int64_t>();
  T* gi = grad_in.data<T>();
  const int64_t stride = grad_in.strides()[size_t(dim)];
  for (int64_t i = 0, n = shape_numel(outer_sizes); i < n; ++i) {
    int64_t g_off, gi_off, i_off, unused;
    unravel(i, outer_sizes, g_strides, gi_strides, g_off, gi_off);
    unravel(i, outer_sizes, i_strides, Shape(), i_off, unused);
    gi[gi_off + ix[i_off] * stride] = g[g_off];
  }
}

}  // namespace

TRIREME_REGISTER_KERNELS(cpu_reduce) {
  constexpr auto cpu = DeviceType::cpu;
  registry.add_each<SumKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "sum", cpu, []<class T>() { return &sum_cpu<T>; });
  registry.add_each<SumSquaresKernel, double, float, bf16_t, f16_t>("sum_squares", cpu,
                                                                    []<class T>() { return &sum_squares_cpu<T>; });
  registry.add_each<SumSquaresManyKernel, double, float, bf16_t, f16_t>(
      "sum_squares_many", cpu, []<class T>() { return &sum_squares_many_cpu<T>; });
  registry.add_each<MaxDimKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "max_dim", cpu, []<class T>() { return &max_dim_cpu<T>; });
  registry.add_each<MaxBackwardKernel, double, float, bf16_t, f16_t>(
      "max_backward", cpu, []<class T>() { return &max_backward_cpu<T>; });
}

}  // namespace trireme::cpu
