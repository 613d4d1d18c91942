// The copy-engine collectives' sum kernel (kernels/cuda/peer_sum.h) on one GPU: the bits of the
// separate adds it stands for, with and without its fused bias and residual, on the vector and
// element paths. (Two GPUs check it inside the collectives: tests/cuda/worker/nccl_worker.cpp.)
#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"

#ifdef TRIREME_WITH_CUDA  // the kernel's header needs the CUDA runtime's

#include "trireme/cuda/stream.h"
#include "trireme/kernels/cuda/peer_sum.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/view.h"

namespace trireme::testing {
namespace {

std::vector<double> values(const Tensor& t) {
  const Tensor c = to_cpu_f64(t);
  return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
}

Tensor gpu_randn(int64_t n, DType dtype, int64_t offset, uint64_t seed) {
  Generator gen(seed);
  const Tensor t = to_device(to_dtype(randn({n + offset}, gen, DType::f64), dtype), Device::cuda(0));
  return narrow(t, 0, offset, n);  // offset 1: not 16-byte aligned, the element path
}

TEST(CudaPeerSum, GivesTheBitsOfSeparateAdds) {
  TRIREME_REQUIRE_GPU();
  const cudaStream_t stream = cuda::current_stream(0).handle();
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    for (int64_t n : {int64_t(7), int64_t(4096), int64_t(3 * 4096 + 5)}) {
      for (int64_t offset : {int64_t(0), int64_t(1)}) {
        for (int inputs : {2, 3}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n) + " offset " + std::to_string(offset) +
                       " inputs " + std::to_string(inputs));
          std::vector<Tensor> in;
          std::vector<const void*> ptrs;
          for (int k = 0; k < inputs; ++k) {
            in.push_back(gpu_randn(n, dtype, offset, 10 + uint64_t(k)));
            ptrs.push_back(in.back().data_ptr());
          }
          const int64_t period = n % 256 == 0 ? 256 : n;
          const Tensor bias = gpu_randn(period, dtype, 0, 20), residual = gpu_randn(n, dtype, offset, 21);
          Tensor sum = in[0];
          for (int k = 1; k < inputs; ++k) sum = add(sum, in[size_t(k)]);  // f32 for 16-bit types, rounded once
          Tensor out = to_device(Tensor::empty({n + offset}, dtype), Device::cuda(0));
          Tensor plain = narrow(out, 0, offset, n);
          cuda_kernels::peer_sum(plain.data_ptr(), ptrs.data(), inputs, n, dtype, false, stream);
          if (inputs == 2) {  // the kernel's two-input case accumulates the same way: the same bits
            EXPECT_EQ(values(plain), values(sum)) << "plain sum";
          }
          // Bias and residual: each rounded as the adds that follow a reduce-scatter would be.
          Tensor fused = clone(plain);
          cuda_kernels::peer_sum(fused.data_ptr(), ptrs.data(), inputs, n, dtype, false, stream, bias.data_ptr(),
                                 period, residual.data_ptr());
          const Tensor rounded = clone(plain);  // the kernel's own rounded sum
          const Tensor want = add(reshape(add(reshape(rounded, {n / period, period}), bias), {n}), residual);
          EXPECT_EQ(values(fused), values(want)) << "with a bias and a residual";
          Tensor capped = clone(plain);  // a grid of 3 blocks: more elements a thread, same bits
          cuda_kernels::peer_sum(capped.data_ptr(), ptrs.data(), inputs, n, dtype, false, stream, bias.data_ptr(),
                                 period, residual.data_ptr(), /*max_blocks=*/3);
          EXPECT_EQ(values(capped), values(want)) << "with a capped grid";
          Tensor biased = clone(plain);
          cuda_kernels::peer_sum(biased.data_ptr(), ptrs.data(), inputs, n, dtype, false, stream, bias.data_ptr(),
                                 period);
          EXPECT_EQ(values(biased), values(reshape(add(reshape(rounded, {n / period, period}), bias), {n})))
              << "with a bias";
        }
      }
    }
  }
}

}  // namespace
}  // namespace trireme::testing

#endif  // TRIREME_WITH_CUDA
