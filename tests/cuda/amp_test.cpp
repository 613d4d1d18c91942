// Mixed precision on one GPU: the amp_unscale kernel against the CPU kernel (values and the
// inf/NaN flag, every dtype), the scaler's unscale of many gradients in one launch against one per
// gradient, accumulate_widening against the CPU kernel, and a short GPT training under CUDA
// autocast (bf16, and f16 with the loss scaler) with f32 master weights that tracks the CPU f32
// run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "amp_tiny_gpt.h"
#include "cuda_test_util.h"
#include "multi_tensor_check.h"
#include "trireme/amp/autocast.h"
#include "trireme/amp/grad_scaler.h"
#include "trireme/kernels/amp.h"
#include "trireme/kernels/registry.h"
#include "trireme/models/gpt.h"
#include "trireme/optim/adamw.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"
#include "trireme/optim/clip_grad.h"

namespace trireme {
namespace {

TEST(CudaAmp, UnscaleMatchesTheCpuKernel) {
  TRIREME_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (int inject = 0; inject < 3; ++inject) {  // none, an inf, a NaN (at an element far in)
      Generator gen(uint64_t(inject) + 3);
      Tensor cpu = to_dtype(mul(randn({5000}, gen), 300.0), dt);
      if (inject > 0) {
        Tensor bad = full({1}, inject == 1 ? std::numeric_limits<double>::infinity() : NAN, dt);
        Tensor slot = narrow(cpu, 0, 4321, 1);
        copy_(slot, bad);
      }
      Tensor gpu = to_device(cpu, Device::cuda(0));
      Tensor flag_cpu = zeros({1}, DType::f32), flag_gpu = zeros({1}, DType::f32, Device::cuda(0));
      find_kernel<AmpUnscaleKernel>("amp_unscale", Device::cpu(), dt)(cpu, flag_cpu, 1.0 / 1024.0);
      find_kernel<AmpUnscaleKernel>("amp_unscale", Device::cuda(0), dt)(gpu, flag_gpu, 1.0 / 1024.0);
      const std::string what = std::string("amp_unscale ") + std::string(dtype_name(dt)) + " inject " + std::to_string(inject);
      testing::expect_close(gpu, cpu, 0.0, what);  // a multiplication by a power of two: exact
      EXPECT_EQ(to_device(flag_gpu, Device::cpu()).to_vector<float>()[0], inject > 0 ? 1.0f : 0.0f) << what;
      EXPECT_EQ(flag_cpu.to_vector<float>()[0], inject > 0 ? 1.0f : 0.0f) << what;
    }
  }
}

TEST(CudaAmp, UnscaleOfManyGradientsIsOneLaunchPerDtypeWithTheBitsOfOnePerGradient) {
  TRIREME_REQUIRE_GPU();
  testing::expect_unscale_matches_amp_unscale_per_tensor(Device::cuda(0));
}

// A 16-bit gradient added into an f32 one: each element's sum is one f32 addition of an exact
// widening, so the GPU's are the CPU's bit for bit (an odd size: the grid's last block is partial).
TEST(CudaAmp, AccumulateWideningMatchesTheCpuKernel) {
  TRIREME_REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f16}) {
    Generator gen(7);
    Tensor acc_cpu = randn({100003}, gen), incoming_cpu = to_dtype(mul(randn({100003}, gen), 3.0), dt);
    Tensor acc_gpu = to_device(acc_cpu, Device::cuda(0)), incoming_gpu = to_device(incoming_cpu, Device::cuda(0));
    find_kernel<AccumulateWideningKernel>("accumulate_widening", Device::cpu(), dt)(acc_cpu, incoming_cpu);
    find_kernel<AccumulateWideningKernel>("accumulate_widening", Device::cuda(0), dt)(acc_gpu, incoming_gpu);
    testing::expect_close(acc_gpu, acc_cpu, 0.0, std::string("accumulate_widening ") + std::string(dtype_name(dt)));
  }
}

// 30 AdamW steps on `device` (tests/amp_tiny_gpt.h).
std::vector<double> train(Device device, const std::string& precision, int64_t* skipped = nullptr) {
  return testing::train_tiny_gpt_amp(precision, {.device = device, .steps = 30, .scaler = {.growth_interval = 10}},
                                     skipped);
}

// bf16 (8-bit mantissa) linears through cuBLASLt vs the CPU's f32: the CPU autocast run tracks
// f32 within 2e-3 nats over 20 steps (tests/amp); on the GPU the GEMMs round differently too,
// so the bound is 5e-2 nats, well under the ~3.5 nats the loss falls.
TEST(CudaAmp, AutocastTrainingTracksTheCpu) {
  TRIREME_REQUIRE_GPU();
  const auto cpu = train(Device::cpu(), "f32");
  const auto cpu_bf16 = train(Device::cpu(), "bf16");
  const auto gpu_bf16 = train(Device::cuda(0), "bf16");
  int64_t skipped = -1;
  const auto gpu_f16 = train(Device::cuda(0), "f16", &skipped);
  double gap_bf16 = 0, gap_f16 = 0, gap_devices = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    gap_bf16 = std::max(gap_bf16, std::abs(gpu_bf16[i] - cpu[i]));
    gap_f16 = std::max(gap_f16, std::abs(gpu_f16[i] - cpu[i]));
    gap_devices = std::max(gap_devices, std::abs(gpu_bf16[i] - cpu_bf16[i]));
  }
  std::printf("[ training ] 30 steps: CPU f32 %.4f -> %.4f; CUDA bf16 autocast -> %.4f (max gap %.2e, vs CPU bf16 "
              "%.2e), CUDA f16 + scaler -> %.4f (max gap %.2e, %lld skipped)\n",
              cpu.front(), cpu.back(), gpu_bf16.back(), gap_bf16, gap_devices, gpu_f16.back(), gap_f16,
              (long long)skipped);
  EXPECT_LE(gap_bf16, 5e-2);
  EXPECT_LE(gap_devices, 5e-2);
  EXPECT_LE(gap_f16, 2e-2);
  EXPECT_EQ(skipped, 0);
  EXPECT_LT(gpu_bf16.back(), cpu.front() - 2.0);
}

}  // namespace
}  // namespace trireme
