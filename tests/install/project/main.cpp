// Makes two tensors and multiplies them through the installed library: ones(2, 3) @ full(3, 2, 2)
// is 6 everywhere, so the sum of its 4 elements is 24.
#include <cstdio>

#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/reduce.h"

int main() {
  using namespace trireme;
  Tensor c = matmul(ones({2, 3}), full({3, 2}, 2.0));
  const double total = sum(c).item();
  std::printf("sum %g\n", total);
  return total == 24.0 ? 0 : 1;
}
