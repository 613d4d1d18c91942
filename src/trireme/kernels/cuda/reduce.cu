// CUDA reductions: sum over any dims, max along one dim and its backward, the twins of
// kernels/cpu/reduce.cpp. Sums accumulate in f32 (f64 for f64, i64 for integers) with a fixed
// reduction order per launch shape, so results are deterministic run to run.
#include <memory>
#include <span>
#include <vector>

#include "trireme/kernels/cuda/block_table.cuh"
#include "trireme/kernels/cuda/column_sum.cuh"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <class D> struct sum_acc { using type = dacc_t<D>; };
template <> struct sum_acc<int32_t> { using type = int64_t; };

// Kept dims index (input, output); reduced dims index the input.
struct ReducePlan {
  Shape kept_sizes, kept_in, kept_out, red_sizes, red_in;
  int64_t num_out = 1, num_red = 1;
};

ReducePlan plan_reduce(const Tensor& in, const Tensor& out) {
  ReducePlan p;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t s = in.sizes()[size_t(d)];
    if (s == 1) continue;
    if (out.sizes()[size_t(d)] == 1) {
      p.red_sizes.push_back(s);
      p.red_in.push_back(in.strides()[size_t(d)]);
      p.num_red *= s;
    } else {
      p.kept_sizes.push_back(s);
      p.kept_in.push_back(in.strides()[size_t(d)]);
      p.kept_out.push_back(out.strides()[size_t(d)]);
      p.num_out *= s;
    }
  }
  return p;
}

// Σ term(i) over i in [begin, end) by one block: each thread adds every blockDim.x-th term from
// begin + threadIdx.x in order, then a tree in shared memory; the total is thread 0's.
template <class A, class Term>
__device__ __forceinline__ A block_sum(int64_t begin, int64_t end, Term term) {
  __shared__ A partial[kBlock];
  A acc = A(0);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += term(i);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  return partial[0];
}

// Rows of the reduced elements (contiguous or not), each cut into `pieces` pieces of `piece`
// consecutive elements: one block per piece, threads striding over it adding term(element) in A,
// then a tree in shared memory; store(row, out_offset, piece_index, total). With one piece per
// row it is the sum of each row, one block per output. A few long rows (a whole tensor's sum)
// take many pieces, since one block per row would leave all but a few of the GPU's
// multiprocessors idle; launch_row_sums then adds the pieces' totals. The pieces depend only on
// the shape, so results are the same run to run.
template <class D, class A, class Term, class Store>
__global__ void sum_rows_kernel(const D* x, int64_t num_red, int64_t piece, int64_t pieces, OffsetCalc<2> kept,
                                OffsetCalc<1> red, bool red_contig, Term term, Store store) {
  const int64_t row = int64_t(blockIdx.x) / pieces, k = int64_t(blockIdx.x) % pieces;
  int64_t offs[2];
  kept.get(row, offs);
  const A total = block_sum<A>(k * piece, min(num_red, (k + 1) * piece), [&](int64_t r) {
    int64_t ro[1] = {r};
    if (!red_contig) red.get(r, ro);
    return term(x[offs[0] + ro[0]]);
  });
  if (threadIdx.x == 0) store(row, offs[1], k, total);
}

// Pieces per row for sum_rows_kernel: about 1024 blocks in all (the H200 has 132 SMs), each piece
// at least 8192 elements; one piece when the rows alone fill the GPU.
inline int64_t row_pieces(int64_t num_out, int64_t num_red) {
  const int64_t want = 1024 / num_out, most = (num_red + 8191) / 8192;
  return std::max<int64_t>(1, std::min(want, most));
}

// o[out offset of row] = finish(Σ term(x) over the row) for every row of the plan, by
// sum_rows_kernel: one block per row, or, for a few long rows, the pieces' totals first into a
// temporary, then each row of totals in order.
template <class D, class A, class Term, class Finish, class O>
void launch_row_sums(const LaunchContext& ctx, Device device, const D* x, O* o, const ReducePlan& p,
                     const OffsetCalc<2>& kept, const OffsetCalc<1>& red, bool red_contig, Term term, Finish finish) {
  const int64_t pieces = row_pieces(p.num_out, p.num_red);
  if (pieces == 1) {
    sum_rows_kernel<D, A><<<unsigned(p.num_out), kBlock, 0, ctx.stream>>>(
        x, p.num_red, p.num_red, 1, kept, red, red_contig, term,
        [=] __device__(int64_t, int64_t at, int64_t, A v) { o[at] = finish(v); });
    TRIREME_CUDA_CHECK_LAUNCH();
    return;
  }
  Tensor totals = Tensor::empty({p.num_out, pieces}, dtype_v<A>, device);
  A* t = totals.data<A>();
  const int64_t piece = (p.num_red + pieces - 1) / pieces;
  sum_rows_kernel<D, A><<<unsigned(p.num_out * pieces), kBlock, 0, ctx.stream>>>(
      x, p.num_red, piece, pieces, kept, red, red_contig, term,
      [=] __device__(int64_t row, int64_t, int64_t k, A v) { t[row * pieces + k] = v; });
  TRIREME_CUDA_CHECK_LAUNCH();
  Shape totals_in = contiguous_strides(p.kept_sizes);  // totals is row-major (kept sizes..., pieces)
  for (int64_t& stride : totals_in) stride *= pieces;
  bool unused = false;
  const OffsetCalc<2> rows = make_offset_calc<2>(p.kept_sizes, {&totals_in, &p.kept_out}, unused);
  sum_rows_kernel<A, A><<<unsigned(p.num_out), kBlock, 0, ctx.stream>>>(
      t, pieces, pieces, 1, rows, OffsetCalc<1>{}, true, [] __device__(A v) { return v; },
      [=] __device__(int64_t, int64_t at, int64_t, A v) { o[at] = finish(v); });
  TRIREME_CUDA_CHECK_LAUNCH();
}

// One thread per output, adding its reduced elements in order. For reductions over outer or
// middle dims whose kept inner dim is contiguous, so that neighbouring threads read neighbouring
// elements: the gradient of a broadcast, e.g. grouped-query attention's k and v heads repeated
// for their query heads, (B, KV, group, T, hd) summed over group. One block per output
// (sum_rows_kernel) would launch a block for every few elements: 3.2 ms for that sum at
// B 8, KV 2, group 7, T 1024, hd 64 in bf16 on an H200, half of a LoRA step's GPU time.
template <class D, class A>
__global__ void sum_strided_kernel(const D* x, D* o, int64_t num_out, int64_t num_red, OffsetCalc<2> kept,
                                   OffsetCalc<1> red, bool red_contig) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < num_out; i += step) {
    int64_t offs[2];
    kept.get(i, offs);
    A acc = A(0);
    for (int64_t r = 0; r < num_red; ++r) {
      int64_t ro[1] = {r};
      if (!red_contig) red.get(r, ro);
      acc += A(to_acc(x[offs[0] + ro[0]]));
    }
    o[offs[1]] = from_acc<D>(dacc_t<D>(acc));
  }
}

template <class T>
void sum_cuda(const Tensor& in, Tensor& out) {
  using D = device_t<T>;
  using A = typename sum_acc<D>::type;
  if (out.numel() == 0) return;
  LaunchContext ctx(out);
  const ReducePlan p = plan_reduce(in, out);
  bool unused = false;
  OffsetCalc<2> kept = make_offset_calc<2>(p.kept_sizes, {&p.kept_in, &p.kept_out}, unused);
  bool red_contig = false;
  OffsetCalc<1> red = make_offset_calc<1>(p.red_sizes, {&p.red_in}, red_contig);
  const bool inner_reduced = !p.red_in.empty() && p.red_in.back() == 1 &&
                             (p.kept_in.empty() || p.kept_in.back() != 1);
  // A matrix read down its columns (one merged reduced dim, one unit-stride kept dim): the
  // two-pass column sum of column_sum.cuh (bias gradients).
  const bool column_matrix = kept.ndim == 1 && kept.strides[0][0] == 1 && red.ndim == 1 && !inner_reduced;
  // Kept elements side by side in memory, and enough of them (or few enough reduced ones) that a
  // thread per output fills the GPU: sum_strided_kernel.
  const bool coalesced_outputs = !inner_reduced && !p.kept_in.empty() && p.kept_in.back() == 1 &&
                                 (p.num_out >= (int64_t(1) << 16) || p.num_red <= 64);
  if (p.num_red == 0) {  // an empty reduction: zeros
    TRIREME_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, size_t(out.numel()) * sizeof(T), ctx.stream));
  } else if (column_matrix) {
    const D* x = dptr<T>(in);
    D* o = dptr<T>(out);
    const int64_t ld = red.strides[0][0], out_stride = kept.strides[0][1];
    const int64_t chunks = column_sum_chunks(p.num_red, p.num_out);
    Tensor partial = Tensor::empty({chunks, p.num_out}, dtype_v<A>, in.device());
    A* part = partial.data<A>();
    launch_column_partial<A>(ctx.stream, p.num_red, p.num_out, chunks,
                             [=] __device__(int64_t r, int64_t c) { return A(to_acc(x[r * ld + c])); }, part);
    launch_column_finish<A>(ctx.stream, part, chunks, p.num_out,
                            [=] __device__(int64_t c, A v) { o[c * out_stride] = from_acc<D>(dacc_t<D>(v)); });
    return;
  } else if (coalesced_outputs) {
    sum_strided_kernel<D, A><<<grid_for(p.num_out), kBlock, 0, ctx.stream>>>(dptr<T>(in), dptr<T>(out), p.num_out,
                                                                              p.num_red, kept, red, red_contig);
  } else {
    launch_row_sums<D, A>(ctx, in.device(), dptr<T>(in), dptr<T>(out), p, kept, red, red_contig,
                          [] __device__(D v) { return A(to_acc(v)); },
                          [] __device__(A v) { return from_acc<D>(dacc_t<D>(v)); });
    return;
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

// ---- Σ x² of many contiguous tensors (sum_squares_many; sum_squares is its one-tensor case) ----
//
// Each tensor is cut into pieces as a long row is (row_pieces: up to 1024 of at least 8192
// elements), a block per piece; then a block per tensor adds its pieces' sums; then one thread
// adds the tensors' sums in order. Every element is widened to f64 and squared (exactly, for f32
// and 16-bit elements) and every sum is in f64. The pieces depend only on the sizes, so a tensor's
// sum has the same bits whichever call it is in, and run to run. A launch's tensors are a table in
// the kernels' parameters (no copy to the device), so a call of more tensors than a table holds
// takes a few.
template <class D>
struct SquaresTable {
  static constexpr int kTensors = 480;
  const D* x[kTensors];
  int64_t n[kTensors];
  int64_t piece[kTensors];       // elements per piece
  int64_t first[kTensors + 1];   // tensor k's pieces are blocks [first[k], first[k + 1]) of the launch
  double* piece_sums;            // by block
  double* tensor_sums;           // by tensor of the table
  int tensors;
};

template <class D>
__global__ void __launch_bounds__(kBlock) squares_pieces_kernel(const __grid_constant__ SquaresTable<D> t) {
  const int64_t b = blockIdx.x;
  const int k = tensor_of_block(t.first, t.tensors, b);
  const D* x = t.x[k];
  const int64_t begin = (b - t.first[k]) * t.piece[k], end = min(t.n[k], begin + t.piece[k]);
  const double total = block_sum<double>(begin, end, [&](int64_t i) {
    const double v = double(to_acc(x[i]));
    return v * v;
  });
  if (threadIdx.x == 0) t.piece_sums[b] = total;
}

template <class D>
__global__ void __launch_bounds__(kBlock) squares_tensors_kernel(const __grid_constant__ SquaresTable<D> t) {
  const int k = blockIdx.x;
  const double* p = t.piece_sums;
  const double total = block_sum<double>(t.first[k], t.first[k + 1], [&](int64_t i) { return p[i]; });
  if (threadIdx.x == 0) t.tensor_sums[k] = total;
}

__global__ void add_in_order_kernel(const double* sums, int64_t n, double* out) {
  double total = 0.0;
  for (int64_t k = 0; k < n; ++k) total += sums[k];
  *out = total;
}

template <class T>
void sum_squares_many_cuda(std::span<const Tensor* const> ins, Tensor& out) {
  using D = device_t<T>;
  using Table = SquaresTable<D>;
  static_assert(sizeof(Table) <= 32000, "a kernel's parameters are at most 32764 bytes");
  LaunchContext ctx(out);
  const int64_t tensors = int64_t(ins.size());
  if (tensors == 0) {
    TRIREME_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, sizeof(double), ctx.stream));
    return;
  }
  int64_t pieces = 0;
  for (const Tensor* in : ins) pieces += row_pieces(1, in->numel());
  // One tensor (sum_squares) skips what adds nothing: with one piece its sum is that piece's, and
  // its total is its sum (0 + v and a block's sum of v alone are v exactly), so it takes one
  // launch, or two, as a traced step's call per gradient did before there were many.
  const bool one = tensors == 1, one_piece = one && pieces == 1;
  Tensor scratch = Tensor::empty({one_piece ? 0 : pieces + tensors}, DType::f64, out.device());
  double* piece_sums = one_piece ? out.data<double>() : scratch.data<double>();
  double* tensor_sums = one ? out.data<double>() : piece_sums + pieces;
  auto table = std::make_unique<Table>();
  for (int64_t k0 = 0; k0 < tensors; k0 += Table::kTensors) {
    Table& t = *table;
    t.tensors = int(std::min<int64_t>(Table::kTensors, tensors - k0));
    t.piece_sums = piece_sums;
    t.tensor_sums = tensor_sums + k0;
    t.first[0] = 0;
    for (int k = 0; k < t.tensors; ++k) {
      const Tensor& in = *ins[size_t(k0 + k)];
      t.x[k] = dptr<T>(in);
      t.n[k] = in.numel();
      const int64_t p = row_pieces(1, t.n[k]);
      t.piece[k] = (t.n[k] + p - 1) / p;
      t.first[k + 1] = t.first[k] + p;
    }
    squares_pieces_kernel<D><<<unsigned(t.first[t.tensors]), kBlock, 0, ctx.stream>>>(t);
    TRIREME_CUDA_CHECK_LAUNCH();
    if (one_piece) return;
    squares_tensors_kernel<D><<<unsigned(t.tensors), kBlock, 0, ctx.stream>>>(t);
    TRIREME_CUDA_CHECK_LAUNCH();
    piece_sums += t.first[t.tensors];
  }
  if (one) return;
  add_in_order_kernel<<<1, 1, 0, ctx.stream>>>(tensor_sums, tensors, out.data<double>());
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void sum_squares_cuda(const Tensor& in, Tensor& out) {
  const Tensor* ins[] = {&in};
  sum_squares_many_cuda<T>(ins, out);
}

// One thread per output row along `dim`; NaN wins and the first maximum wins, as on the CPU.
template <class D>
__global__ void max_dim_kernel(const D* x, D* v, int64_t* ix, int64_t outer, int64_t n, int64_t stride, OffsetCalc<3> oc) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outer) return;
  int64_t off[3];
  oc.get(i, off);
  auto best = to_acc(x[off[0]]);
  int64_t best_j = 0;
  for (int64_t j = 1; j < n; ++j) {
    auto val = to_acc(x[off[0] + j * stride]);
    if (val > best || (val != val && best == best)) {
      best = val;
      best_j = j;
    }
  }
  v[off[1]] = from_acc<D>(best);
  ix[off[2]] = best_j;
}

// Long rows (the vocabulary-parallel loss's row maxima over ~25k columns): a block per row, each
// thread scanning a strided share, then a tree reduction with the same rule (NaN wins, then the
// larger value, then the smaller index), so the answer equals the one-thread scan.
template <class V>
__device__ inline bool max_better(V val, int64_t j, V best, int64_t best_j) {
  const bool val_nan = val != val, best_nan = best != best;
  if (val_nan != best_nan) return val_nan;
  if (!val_nan && val != best) return val > best;
  return j < best_j;
}

template <class D>
__global__ void max_dim_rows_kernel(const D* x, D* v, int64_t* ix, int64_t n, int64_t stride, OffsetCalc<3> oc) {
  using V = decltype(to_acc(x[0]));
  __shared__ V best_v[kBlock];
  __shared__ int64_t best_i[kBlock];
  int64_t off[3];
  oc.get(blockIdx.x, off);
  V best = to_acc(x[off[0]]);
  int64_t best_j = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const V val = to_acc(x[off[0] + j * stride]);
    if (max_better(val, j, best, best_j)) {
      best = val;
      best_j = j;
    }
  }
  best_v[threadIdx.x] = best;
  best_i[threadIdx.x] = best_j;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half && max_better(best_v[threadIdx.x + half], best_i[threadIdx.x + half],
                                               best_v[threadIdx.x], best_i[threadIdx.x])) {
      best_v[threadIdx.x] = best_v[threadIdx.x + half];
      best_i[threadIdx.x] = best_i[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    v[off[1]] = from_acc<D>(best_v[0]);
    ix[off[2]] = best_i[0];
  }
}

template <class T>
void max_dim_cuda(const Tensor& in, int64_t dim, Tensor& values, Tensor& indices) {
  using D = device_t<T>;
  Shape outer_sizes, in_s, v_s, i_s;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (d == dim) continue;
    outer_sizes.push_back(in.sizes()[size_t(d)]);
    in_s.push_back(in.strides()[size_t(d)]);
    v_s.push_back(values.strides()[size_t(d)]);
    i_s.push_back(indices.strides()[size_t(d)]);
  }
  const int64_t outer = shape_numel(outer_sizes);
  if (outer == 0) return;
  LaunchContext ctx(values);
  bool unused = false;
  OffsetCalc<3> oc = make_offset_calc<3>(outer_sizes, {&in_s, &v_s, &i_s}, unused);
  const int64_t n = in.sizes()[size_t(dim)];
  if (n >= 1024) {
    max_dim_rows_kernel<D><<<unsigned(outer), kBlock, 0, ctx.stream>>>(dptr<T>(in), dptr<T>(values),
                                                                        indices.data<int64_t>(), n,
                                                                        in.strides()[size_t(dim)], oc);
  } else {
    max_dim_kernel<D><<<unsigned((outer + kBlock - 1) / kBlock), kBlock, 0, ctx.stream>>>(
        dptr<T>(in), dptr<T>(values), indices.data<int64_t>(), outer, n, in.strides()[size_t(dim)], oc);
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

template <class T>
void max_backward_cuda(const Tensor& grad, const Tensor& indices, int64_t dim, Tensor& grad_in) {
  using D = device_t<T>;
  Shape outer_sizes, g_s, i_s, gi_s;
  for (int64_t d = 0; d < grad_in.dim(); ++d) {
    if (d == dim) continue;
    outer_sizes.push_back(grad_in.sizes()[size_t(d)]);
    g_s.push_back(grad.strides()[size_t(d)]);
    i_s.push_back(indices.strides()[size_t(d)]);
    gi_s.push_back(grad_in.strides()[size_t(d)]);
  }
  LaunchContext ctx(grad_in);
  const D* g = dptr<T>(grad);
  const int64_t* ix = indices.data<int64_t>();
  D* gi = dptr<T>(grad_in);
  const int64_t stride = grad_in.strides()[size_t(dim)];
  launch_elementwise<3>(ctx, outer_sizes, {&g_s, &i_s, &gi_s}, [=] __device__(const int64_t(&off)[3]) {
    gi[off[2] + ix[off[1]] * stride] = g[off[0]];
  });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_reduce) {
  constexpr auto cuda = DeviceType::cuda;
  registry.add_each<SumKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "sum", cuda, []<class T>() { return &sum_cuda<T>; });
  registry.add_each<SumSquaresKernel, double, float, bf16_t, f16_t>("sum_squares", cuda,
                                                                    []<class T>() { return &sum_squares_cuda<T>; });
  registry.add_each<SumSquaresManyKernel, double, float, bf16_t, f16_t>(
      "sum_squares_many", cuda, []<class T>() { return &sum_squares_many_cuda<T>; });
  registry.add_each<MaxDimKernel, double, float, bf16_t, f16_t, int64_t, int32_t>(
      "max_dim", cuda, []<class T>() { return &max_dim_cuda<T>; });
  registry.add_each<MaxBackwardKernel, double, float, bf16_t, f16_t>(
      "max_backward", cuda, []<class T>() { return &max_backward_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
