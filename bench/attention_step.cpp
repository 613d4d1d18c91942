// Times scaled_dot_product_attention forward + backward (through autograd, as a model runs it) on
// one GPU or the CPU, q, k, v being head views of one fused (B, T, 3·H·hd) projection output as
// in nn/attention.cpp, the backward seeded with a fixed gradient. Prints one JSON line; bench/gpu/attention.sh runs it beside PyTorch's SDPA.
//   build/bench/attention_step --batch 16 --heads 12 --seq 1024 --hd 64 --dtype bf16 --device cuda
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trireme/cuda/device.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"

using namespace trireme;

int main(int argc, char** argv) {
  int64_t batch = 16, heads = 12, seq = 1024, hd = 64, iters = 20, warmup = 5;
  std::string dtype_arg = "bf16", device_arg = "cuda";
  bool causal = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--batch") batch = std::atoll(v);
    else if (k == "--heads") heads = std::atoll(v);
    else if (k == "--seq") seq = std::atoll(v);
    else if (k == "--hd") hd = std::atoll(v);
    else if (k == "--iters") iters = std::atoll(v);
    else if (k == "--dtype") dtype_arg = v;
    else if (k == "--device") device_arg = v;
    else if (k == "--causal") causal = std::atoi(v) != 0;
    else {
      std::fprintf(stderr, "attention_step: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const DType dtype = dtype_arg == "f32" ? DType::f32 : dtype_arg == "f16" ? DType::f16 : DType::bf16;
  const bool on_gpu = device_arg == "cuda";
  if (on_gpu && !cuda::is_available()) {
    std::fprintf(stderr, "attention_step: no GPU: %s\n", cuda::unavailable_reason().c_str());
    return 2;
  }
  const Device device = on_gpu ? Device::cuda(0) : Device::cpu();
  Generator gen(0);
  const int64_t C = heads * hd;
  Tensor qkv = to_device(to_dtype(randn({batch, seq, 3 * C}, gen), dtype), device).detach();
  qkv.set_requires_grad(true);
  Tensor w = to_device(to_dtype(randn({batch, heads, seq, hd}, gen), dtype), device);
  auto head = [&](int64_t i) { return transpose(view(narrow(qkv, 2, i * C, C), {batch, seq, heads, hd}), 1, 2); };
  auto sync = [&] {
    if (on_gpu) cuda::synchronize(0);
  };
  auto step = [&](bool fwd_only) {
    Tensor out = scaled_dot_product_attention(head(0), head(1), head(2), causal);
    if (!fwd_only) {
      out.backward(w);
      qkv.set_grad(Tensor());
    }
  };
  auto time_it = [&](bool fwd_only) {
    for (int64_t i = 0; i < warmup; ++i) step(fwd_only);
    sync();
    std::vector<double> ts;
    for (int64_t i = 0; i < iters; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      step(fwd_only);
      sync();
      ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2] * 1e3;
  };
  const double fwd_ms = time_it(true), step_ms = time_it(false);
  // Attention FLOPs: 2 GEMMs forward, 5 backward (with the recomputation), halved when causal.
  const double flops_fwd = 4.0 * double(batch * heads) * double(seq) * double(seq) * double(hd) * (causal ? 0.5 : 1.0);
  std::printf(
      "{\"impl\": \"trireme\", \"dtype\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"hd\": %lld, \"causal\": %d, "
      "\"fwd_ms\": %.3f, \"fwd_bwd_ms\": %.3f, \"fwd_tflops\": %.1f}\n",
      dtype_arg.c_str(), (long long)batch, (long long)heads, (long long)seq, (long long)hd, int(causal), fwd_ms,
      step_ms, flops_fwd / (fwd_ms * 1e-3) / 1e12);
  return 0;
}
