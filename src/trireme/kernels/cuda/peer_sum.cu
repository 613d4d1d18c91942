// The peer all-reduce's sum: one pass that reads every input once and writes the result once.
#include "trireme/kernels/cuda/peer_sum.h"

#include <algorithm>

#include "trireme/kernels/cuda/vector_map.cuh"

namespace trireme::cuda_kernels {

namespace {

template <class D>
struct PeerInputs {
  const D* p[kMaxPeerSumInputs];
};

// V elements per thread and input: 16-byte loads when every buffer is 16-byte aligned (V > 1),
// else one element (V = 1). K > 0: exactly K inputs, all loaded before the first add, so that
// a thread's loads are in flight together (with a runtime count each load waited for the last:
// 27 us instead of ~12 for a 16 MiB bf16 sum of 2 on an H200). K = 0: k inputs, any k.
// bias: null, or `period` values added to the rounded sums (period a multiple of V when V > 1);
// residual: null, or n values added after that.
template <class D, int V, int K>
__global__ void peer_sum_kernel(int64_t n, D* out, PeerInputs<D> in, int k, bool average, const D* bias,
                                int64_t period, const D* residual) {
  using A = dacc_t<D>;
  if constexpr (K > 0) k = K;
  const int64_t vectors = n / V;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = first; v < vectors; v += stride) {
    A acc[V];
    if constexpr (K > 0) {
      Packed<D, V> x[K];
#pragma unroll
      for (int j = 0; j < K; ++j) x[j] = reinterpret_cast<const Packed<D, V>*>(in.p[j])[v];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = to_acc(x[0].v[e]);
#pragma unroll
      for (int j = 1; j < K; ++j) {
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += to_acc(x[j].v[e]);
      }
    } else {
      const Packed<D, V> x0 = reinterpret_cast<const Packed<D, V>*>(in.p[0])[v];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = to_acc(x0.v[e]);
      for (int j = 1; j < k; ++j) {
        const Packed<D, V> xj = reinterpret_cast<const Packed<D, V>*>(in.p[j])[v];
#pragma unroll
        for (int e = 0; e < V; ++e) acc[e] += to_acc(xj.v[e]);
      }
    }
    Packed<D, V> o;
#pragma unroll
    for (int e = 0; e < V; ++e) o.v[e] = from_acc<D>(average ? acc[e] / A(k) : acc[e]);
    if (bias) {
      const Packed<D, V> b = reinterpret_cast<const Packed<D, V>*>(bias)[v % (period / V)];
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = from_acc<D>(to_acc(o.v[e]) + to_acc(b.v[e]));
    }
    if (residual) {
      const Packed<D, V> r = reinterpret_cast<const Packed<D, V>*>(residual)[v];
#pragma unroll
      for (int e = 0; e < V; ++e) o.v[e] = from_acc<D>(to_acc(o.v[e]) + to_acc(r.v[e]));
    }
    reinterpret_cast<Packed<D, V>*>(out)[v] = o;
  }
  for (int64_t i = vectors * V + first; i < n; i += stride) {
    A acc = to_acc(in.p[0][i]);
    for (int j = 1; j < k; ++j) acc += to_acc(in.p[j][i]);
    D o = from_acc<D>(average ? acc / A(k) : acc);
    if (bias) o = from_acc<D>(to_acc(o) + to_acc(bias[i % period]));
    if (residual) o = from_acc<D>(to_acc(o) + to_acc(residual[i]));
    out[i] = o;
  }
}

template <class T>
void launch(void* out, const void* const* inputs, int k, int64_t n, bool average, cudaStream_t stream,
            const void* bias_in, int64_t period, const void* residual_in, int max_blocks) {
  using D = device_t<T>;
  constexpr int V = int(16 / sizeof(D));
  PeerInputs<D> in{};
  const D* bias = static_cast<const D*>(bias_in);
  const D* residual = static_cast<const D*>(residual_in);
  bool aligned = aligned16(out) && (!bias || (aligned16(bias) && period % V == 0)) && (!residual || aligned16(residual));
  for (int j = 0; j < k; ++j) {
    in.p[j] = static_cast<const D*>(inputs[j]);
    aligned = aligned && aligned16(inputs[j]);
  }
  D* o = static_cast<D*>(out);
  auto grid = [&](int64_t items) {
    const unsigned g = grid_for(items);
    return max_blocks > 0 ? std::min<unsigned>(g, unsigned(max_blocks)) : g;
  };
  if (aligned && k == 2) {  // two ranks: the case the peer path is on for by default
    peer_sum_kernel<D, V, 2><<<grid((n + V - 1) / V), kBlock, 0, stream>>>(n, o, in, k, average, bias, period, residual);
  } else if (aligned) {
    peer_sum_kernel<D, V, 0><<<grid((n + V - 1) / V), kBlock, 0, stream>>>(n, o, in, k, average, bias, period, residual);
  } else {
    peer_sum_kernel<D, 1, 0><<<grid(n), kBlock, 0, stream>>>(n, o, in, k, average, bias, period, residual);
  }
  TRIREME_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool peer_sum_supports(DType dtype) {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

void peer_sum(void* out, const void* const* inputs, int n_inputs, int64_t numel, DType dtype, bool average,
              cudaStream_t stream, const void* bias, int64_t bias_period, const void* residual, int max_blocks) {
  TRIREME_CHECK(n_inputs >= 1 && n_inputs <= kMaxPeerSumInputs, "peer_sum: ", n_inputs, " inputs (1 to ",
                kMaxPeerSumInputs, ")");
  TRIREME_CHECK(!bias || (bias_period > 0 && numel % bias_period == 0), "peer_sum: a bias of ", bias_period,
                " values does not repeat along ", numel);
  if (numel == 0) return;
  switch (dtype) {
    case DType::f64: return launch<double>(out, inputs, n_inputs, numel, average, stream, bias, bias_period, residual, max_blocks);
    case DType::f32: return launch<float>(out, inputs, n_inputs, numel, average, stream, bias, bias_period, residual, max_blocks);
    case DType::bf16: return launch<bf16_t>(out, inputs, n_inputs, numel, average, stream, bias, bias_period, residual, max_blocks);
    case DType::f16: return launch<f16_t>(out, inputs, n_inputs, numel, average, stream, bias, bias_period, residual, max_blocks);
    default: TRIREME_FAIL("peer_sum: dtype ", dtype, " is not supported");
  }
}

}  // namespace trireme::cuda_kernels
