// The sums half of the matrix-product-with-row-sums kernels (see linalg.h).
#include "trireme/kernels/linalg.h"

#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"

namespace trireme {

void sum_rows_of(const Tensor& a, Tensor& row_sums) {
  const int64_t m = a.size(0), k = a.size(1);
  const Tensor at = a.alias({k, m}, {a.stride(1), a.stride(0)}, a.offset());
  Tensor keepdim = row_sums.alias({1, m}, {m, 1}, row_sums.offset());
  find_kernel<SumKernel>("sum", a.device(), a.dtype())(at, keepdim);
}

}  // namespace trireme
