// Tensor metadata, views, versions and factories.
#include <gtest/gtest.h>

#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

using namespace trireme;

TEST(Tensor, EmptyIsContiguous) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::f32);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
}

// Tensor::borrowed: a view of memory the caller owns, read and written in place, never freed by
// the tensor (ASan would report the free of a stack array).
TEST(Tensor, BorrowedMemoryIsUsedInPlaceAndNotFreed) {
  float owned[6] = {0, 1, 2, 3, 4, 5};
  {
    Tensor t = Tensor::borrowed(owned, {2, 3}, DType::f32, Device::cpu());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.at({1, 2}), 5.0);
    EXPECT_EQ(sum(t).item(), 15.0);
    add_(t, 1.0);
  }
  EXPECT_EQ(owned[0], 1.0f);
  EXPECT_EQ(owned[5], 6.0f);
  EXPECT_THROW(Tensor::borrowed(owned, {-1}, DType::f32, Device::cpu()), Error);
}

TEST(Tensor, TransposeIsAViewAndContiguousCopies) {
  Tensor a = arange(0, 6, 1, DType::f32);
  Tensor m = reshape(a, {2, 3});
  Tensor t = transpose(m, 0, 1);
  EXPECT_EQ(t.storage(), a.storage());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.at({2, 1}), 5.0);
  Tensor c = contiguous(t);
  EXPECT_NE(c.storage(), a.storage());
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(contiguous(m).same(m));
}

TEST(Tensor, InPlaceBumpsSharedVersion) {
  Tensor a = zeros({4});
  Tensor v = slice(a, 0, 1, 3);
  uint64_t before = a.version();
  add_(v, 1.0);
  EXPECT_EQ(a.version(), before + 1);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 1, 1, 0}));
}

TEST(Autograd, SimpleChain) {
  Tensor x = from_vector<double>({1, 2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = sum(mul(x, x));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
}
