// The names and arities of the ops a fused elementwise program holds.
#include "trireme/kernels/fused.h"

#include <array>

namespace trireme {
namespace {

constexpr std::array<const char*, kNumPointwiseOps> kNames = {
    "neg", "exp", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "relu", "silu", "gelu_erf", "gelu_tanh",
    "add_scalar", "mul_scalar", "pow_scalar", "rsub_scalar", "rdiv_scalar",
    "add", "sub", "mul", "div", "pow", "maximum", "tanh_backward", "sigmoid_backward", "relu_backward",
    "silu_backward", "gelu_erf_backward", "gelu_tanh_backward",
    "copy"};

}  // namespace

const char* pointwise_op_name(PointwiseOp op) { return kNames[size_t(op)]; }

std::optional<PointwiseOp> pointwise_op_named(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (name == kNames[i]) return PointwiseOp(i);
  }
  return std::nullopt;
}

int pointwise_arity(PointwiseOp op) { return is_unary(op) || op == PointwiseOp::copy ? 1 : 2; }

}  // namespace trireme
