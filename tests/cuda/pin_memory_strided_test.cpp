// pin_memory of a non-contiguous CPU view: a contiguous pinned copy of its elements in row-major
// order, with whole-row copies (last stride 1) and element-by-element ones (any other stride).
#include <cstring>

#include "cuda_test_util.h"
#include "trireme/cuda/pinned.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/view.h"

namespace trireme {
namespace {

#ifdef TRIREME_WITH_CUDA

void expect_pinned_copy_of(const Tensor& view) {
  ASSERT_FALSE(view.is_contiguous());
  const Tensor expected = clone(view);
  const Tensor pinned = cuda::pin_memory(view);
  EXPECT_TRUE(cuda::is_pinned(pinned));
  EXPECT_TRUE(pinned.is_contiguous());
  EXPECT_EQ(pinned.sizes(), view.sizes());
  EXPECT_EQ(std::memcmp(pinned.data_ptr(), expected.data_ptr(), size_t(view.numel()) * view.element_size()), 0);
}

TEST(CudaPinned, PinningAStridedViewCopiesItsElementsInOrder) {
  TRIREME_REQUIRE_GPU();
  Generator gen(17);
  const Tensor x = randn({5, 6, 7}, gen, DType::f64);
  expect_pinned_copy_of(narrow(x, 2, 1, 4));                     // rows of 4 contiguous elements
  expect_pinned_copy_of(transpose(x, 0, 2));                     // last stride 42
  expect_pinned_copy_of(slice(narrow(x, 1, 2, 3), 2, 0, 7, 3));  // stepped and offset
  const Tensor b = randn({9, 4}, gen, DType::bf16);
  expect_pinned_copy_of(transpose(b, 0, 1));
}

#endif

}  // namespace
}  // namespace trireme
