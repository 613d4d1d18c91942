// The ops over many tensors (ops/multi_tensor.h) on the CPU: the bits of the per-tensor ops, in
// one kernel call per dtype.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "multi_tensor_check.h"

using namespace trireme;

TEST(MultiTensor, SumSquaresAllIsSumSquaresPerTensorAddedInOrderInOneCall) {
  trireme::testing::expect_sum_squares_all_matches_sum_squares(Device::cpu());
}

TEST(MultiTensor, MulAllIsMulPerTensorInOneCallPerDtype) { trireme::testing::expect_mul_all_matches_mul(Device::cpu()); }

TEST(MultiTensor, TensorsOfAnotherDeviceAreAnError) {
  const std::vector<Tensor> xs = {zeros({2})};
  trireme::testing::expect_error([&] { sum_squares_all(xs, Device::cuda(0)); }, {"sum_squares_all: a tensor on cpu among tensors on"});
}
