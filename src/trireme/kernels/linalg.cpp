// The unfused halves of the matrix-product kernels that do a second thing (see linalg.h): the
// row sums, GELU and GELU's gradient, by the device's own kernels.
#include "trireme/kernels/linalg.h"

#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/reduce.h"
#include "trireme/kernels/registry.h"

namespace trireme {

void sum_rows_of(const Tensor& a, Tensor& row_sums) {
  const int64_t m = a.size(0), k = a.size(1);
  const Tensor at = a.alias({k, m}, {a.stride(1), a.stride(0)}, a.offset());
  Tensor keepdim = row_sums.alias({1, m}, {m, 1}, row_sums.offset());
  find_kernel<SumKernel>("sum", a.device(), a.dtype())(at, keepdim);
}

void matmul_then_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& out, Tensor& pre) {
  find_kernel<MatmulKernel>("matmul", pre.device(), pre.dtype())(a, b, bias, pre);
  find_kernel<UnaryKernel>("gelu_tanh", out.device(), out.dtype())(pre, out, 0.0);
}

void matmul_then_gelu_backward(const Tensor& a, const Tensor& b, const Tensor& pre, Tensor& out) {
  // The product goes into out, which GELU's gradient then overwrites element by element.
  find_kernel<MatmulKernel>("matmul", out.device(), out.dtype())(a, b, Tensor(), out);
  find_kernel<BinaryKernel>("gelu_tanh_backward", out.device(), out.dtype())(out, pre, out);
}

}  // namespace trireme
