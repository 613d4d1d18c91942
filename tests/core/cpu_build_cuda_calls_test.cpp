// A CPU build (no CUDA) still defines cuda::current_device, set_device and synchronize, so that
// programs guarding them with is_available() link whatever the optimiser keeps; reached, they
// refuse with the reason instead of crashing.
#include <gtest/gtest.h>

#include <string>

#include "trireme/core/error.h"
#include "trireme/cuda/device.h"

namespace trireme {
namespace {

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(CpuBuildCudaCalls, RefuseWithTheReason) {
#ifdef TRIREME_WITH_CUDA
  GTEST_SKIP() << "a CUDA build defines them for real";
#else
  EXPECT_EQ(error_of([] { cuda::synchronize(0); }), "cuda::synchronize(0): " + cuda::unavailable_reason());
  EXPECT_EQ(error_of([] { cuda::set_device(1); }), "cuda::set_device(1): " + cuda::unavailable_reason());
  EXPECT_EQ(error_of([] { (void)cuda::current_device(); }), "cuda::current_device: " + cuda::unavailable_reason());
#endif
}

}  // namespace
}  // namespace trireme
