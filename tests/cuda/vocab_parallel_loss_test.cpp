// The fused vocabulary-parallel cross-entropy kernels on CUDA: on one rank (the full vocabulary
// plus padding columns) the loss and gradient equal cross_entropy's, for f32 and bf16 logits;
// the CPU kernels give the same numbers; a target outside the vocabulary is reported.
#include <gtest/gtest.h>

#include "cuda_op_check.h"
#include "expect_error.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/parallel/tp_layers.h"

namespace trireme {
namespace {

using parallel::TpGroup;
using parallel::vocab_parallel_cross_entropy;
using testing::expect_close;
using trireme::testing::expect_error;

double host_item(const Tensor& t) { return to_device(t, Device::cpu()).item(); }

TEST(CudaVocabParallelLoss, OneRankEqualsCrossEntropy) {
  TRIREME_REQUIRE_GPU();
  const int64_t n = 37, v = 1001, pad = 7;
  Generator gen(11);
  Tensor logits_cpu = randn({n, v}, gen) * 3.0;
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < n; ++i) tv.push_back(i % 5 == 2 ? -100 : (i * 97) % v);
  Tensor targets_cpu = from_vector<int64_t>(tv, {n});
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = to_device(to_dtype(logits_cpu, dt), Device::cuda(0)).detach().set_requires_grad(true);
    Tensor padded_in = to_device(to_dtype(cat({logits_cpu, full({n, pad}, 40.0)}, 1), dt), Device::cuda(0))
                           .detach()
                           .set_requires_grad(true);
    Tensor t = to_device(targets_cpu, Device::cuda(0));
    Tensor ref = cross_entropy(x, t);
    Tensor got = vocab_parallel_cross_entropy(padded_in, t, {.start = 0, .real = v, .vocab_size = v},
                                              TpGroup::single());
    const double tol = dt == DType::f32 ? 1e-5 : 2e-2;
    EXPECT_NEAR(host_item(got), host_item(ref), tol * std::abs(host_item(ref)));
    ref.backward();
    got.backward();
    expect_close(contiguous(narrow(padded_in.grad(), 1, 0, v)), to_device(x.grad(), Device::cpu()),
                 dt == DType::f32 ? 1e-5 : 2e-2, "vocab grad");
    EXPECT_EQ(to_dtype(to_device(contiguous(narrow(padded_in.grad(), 1, v, pad)), Device::cpu()), DType::f32)
                  .to_vector<float>(),
              std::vector<float>(size_t(n * pad), 0.0f));
    // The CPU kernels agree.
    Tensor xc = to_dtype(cat({logits_cpu, full({n, pad}, 40.0)}, 1), dt).detach().set_requires_grad(true);
    Tensor got_cpu = vocab_parallel_cross_entropy(xc, targets_cpu, {.start = 0, .real = v, .vocab_size = v},
                                                  TpGroup::single());
    EXPECT_NEAR(host_item(got), got_cpu.item(), tol * std::abs(got_cpu.item()));
  }
  Tensor z = to_device(zeros({2, 5}), Device::cuda(0));
  Tensor bad = vocab_parallel_cross_entropy(z, to_device(from_vector<int64_t>({1, 9}, {2}), Device::cuda(0)),
                                            {.start = 0, .real = 5, .vocab_size = 5}, TpGroup::single());
  expect_error([&] { host_item(bad); }, "target 9 at row 1 is outside the vocabulary of 5");
}

}  // namespace
}  // namespace trireme
