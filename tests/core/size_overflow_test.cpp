// Sizes whose element or byte count does not fit in int64 are errors naming the shape, never a
// wrapped count and a too-small allocation.
#include <gtest/gtest.h>

#include "expect_error.h"

#include "trireme/core/tensor.h"

using namespace trireme;


TEST(SizeOverflow, ElementCountOfAHugeShapeIsAnError) {
  const int64_t big = int64_t(1) << 40;
  std::string e = trireme::testing::error_message([&] { shape_numel({big, big}); });
  EXPECT_NE(e.find("element count of shape"), std::string::npos) << e;
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
  EXPECT_EQ(shape_numel({big, 4}), big * 4);  // large but representable counts still work
}

TEST(SizeOverflow, ByteCountOfAnEmptyTensorIsCheckedBeforeAllocating) {
  // 2^61 f64 elements are 2^64 bytes: the element count fits, the byte count wraps to 0.
  std::string e = trireme::testing::error_message([] { Tensor::empty({int64_t(1) << 61}, DType::f64); });
  EXPECT_NE(e.find("byte count"), std::string::npos) << e;
  e = trireme::testing::error_message([] { Tensor::empty({1623261534117349, 1623261534117349}, DType::f32); });
  EXPECT_NE(e.find("overflows"), std::string::npos) << e;
}

TEST(SizeOverflow, StridesAndBorrowedTensorsAreChecked) {
  const int64_t big = int64_t(1) << 32;
  EXPECT_THROW(contiguous_strides({0, big, big, big}), Error);
  float x = 0;
  EXPECT_THROW(Tensor::borrowed(&x, {int64_t(1) << 62, 4}, DType::f32, Device::cpu()), Error);
}

TEST(SizeOverflow, AliasExtentsAreCheckedInsteadOfWrapping) {
  Tensor t = Tensor::empty({4}, DType::f32);
  // (2 - 1) x 2^62 x 4 bytes wraps without checks; the view must be refused either way.
  EXPECT_THROW(t.alias({2}, {int64_t(1) << 62}, 0), Error);
  EXPECT_THROW(t.alias({2, 2}, {INT64_MAX, 1}, 0), Error);
  EXPECT_THROW(t.alias({-1}, {1}, 0), Error);
  EXPECT_NO_THROW(t.alias({2}, {2}, 0));
}
