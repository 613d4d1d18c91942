// Model FLOPs and device peaks for MFU (see throughput.h).
#include "trireme/train/throughput.h"

#ifdef TRIREME_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace trireme::train {

double model_flops_per_token(int64_t num_parameters, int64_t n_layer, int64_t d_model, int64_t block_size) {
  return 6.0 * double(num_parameters) + 12.0 * double(n_layer) * double(d_model) * double(block_size);
}

std::optional<double> bf16_peak_flops_for(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return 989.4e12;
  if (has("H100")) return has("PCIe") ? 756.0e12 : 989.4e12;
  if (has("A100")) return 312.0e12;
  return std::nullopt;
}

std::optional<PeakFlops> device_peak_flops(Device device) {
  if (!device.is_cuda()) return std::nullopt;
#ifdef TRIREME_WITH_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index) != cudaSuccess) {
    cudaGetLastError();  // clear the error so that later CUDA calls do not report it
    return std::nullopt;
  }
  const std::string name = prop.name;
  if (auto peak = bf16_peak_flops_for(name)) return PeakFlops{name, *peak};
#endif
  return std::nullopt;
}

}  // namespace trireme::train
