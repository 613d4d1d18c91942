// What MFU (model FLOPs utilization) needs: the model's FLOPs per trained token and the peak
// FLOP/s of the device it trains on.
//
//   double f = model_flops_per_token(params, cfg.model.n_layer, cfg.model.d_model, cfg.model.block_size);
//   if (auto peak = device_peak_flops(Device::cuda(0))) mfu = f * tokens_per_s / peak->flops;
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trireme/core/device.h"

namespace trireme::train {

// Forward + backward FLOPs per token of a GPT (PaLM, appendix B): 6 per parameter (2 forward,
// 4 backward) plus the attention scores and their weighted sum, 12 * n_layer * d_model *
// block_size (counted over the whole block, as the usual MFU figures do).
double model_flops_per_token(int64_t num_parameters, int64_t n_layer, int64_t d_model, int64_t block_size);

struct PeakFlops {
  std::string device_name;  // "NVIDIA H200"
  double flops = 0;         // dense bf16 tensor-core FLOP/s
};

// The dense bf16 peak of a GPU model named `name` (as CUDA names it): H100 (SXM 989 TFLOP/s,
// PCIe 756), H200 (989), A100 (312). Unknown names: nullopt (no MFU rather than a guess).
std::optional<double> bf16_peak_flops_for(const std::string& name);

// The peak of `device`: a known GPU's bf16 peak; nullopt for the CPU (its peak depends on the
// cores, clocks and vector units in use, which trireme does not measure) and for unknown GPUs.
std::optional<PeakFlops> device_peak_flops(Device device);

}  // namespace trireme::train
