// Fused elementwise kernels: one kernel call that runs a chain of pointwise kernels (unary,
// binary, copy) over one shape, element by element, keeping the chain's intermediates in
// registers or cache-sized tiles instead of memory. The graph's fusion pass (graph/fusion.h)
// builds the program; the backends run it (kernels/cpu/fused.cpp: a loop over tiles calling the
// elementwise kernels' own per-element functions; kernels/cuda/fused.cu: CUDA C++ generated per
// program and compiled with NVRTC, from the CUDA elementwise kernels' device functions).
//
// Each step computes what its unfused kernel computes: in acc_t of its dtype, rounded to its
// dtype, so a fused chain gives the unfused chain's bits.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trireme/core/tensor.h"

namespace trireme {

// The pointwise kernels a program can hold, by the op name they are registered under.
enum class PointwiseOp : uint8_t {
  // unary (UnaryKernel; alpha is its scalar operand)
  neg, exp, log, sqrt, rsqrt, abs, tanh, sigmoid, relu, silu, gelu_erf, gelu_tanh,
  add_scalar, mul_scalar, pow_scalar, rsub_scalar, rdiv_scalar,
  // binary (BinaryKernel)
  add, sub, mul, div, pow, maximum, tanh_backward, sigmoid_backward, relu_backward, silu_backward,
  gelu_erf_backward, gelu_tanh_backward,
  // copy (CopyKernel): a conversion to the step's dtype
  copy,
};
inline constexpr int kNumPointwiseOps = int(PointwiseOp::copy) + 1;

const char* pointwise_op_name(PointwiseOp op);
std::optional<PointwiseOp> pointwise_op_named(std::string_view name);
int pointwise_arity(PointwiseOp op);  // 1 or 2
inline bool is_unary(PointwiseOp op) { return op <= PointwiseOp::rdiv_scalar; }

// One step: slot `out` = op(slots `in`; alpha), computed in acc_t of the out slot's dtype (for a
// copy: the input's value converted) and rounded to that dtype.
struct FusedStep {
  PointwiseOp op = PointwiseOp::neg;
  int out = -1;
  int in[2] = {-1, -1};
  double alpha = 0;  // unary ops' scalar operand
};

// A program over `sizes`: slots [0, inputs) are the kernel's input tensors (tensors[0..inputs):
// any strides, broadcast ones with stride 0); the steps fill the other slots in order; output k
// (tensors[inputs + k], contiguous) receives slot outputs[k].
struct FusedProgram {
  std::string name;               // for messages: the unfused ops, e.g. "add+gelu_tanh"
  Shape sizes;
  std::vector<DType> slot_dtype;  // per slot
  int inputs = 0;
  std::vector<Shape> input_strides;  // per input, as traced (a backend may specialise on them)
  std::vector<int> outputs;
  std::vector<FusedStep> steps;
  std::shared_ptr<const void> compiled;  // what the backend's prepare kernel made (CUDA: the module)
};

// Makes a program ready to run on a device of the kernel's type (CUDA: generates and compiles its
// kernel); on failure leaves `error` non-empty, saying why.
using FusedPrepareKernel = void (*)(FusedProgram& program, Device device, std::string& error);
// Runs a prepared program: tensors[0..inputs) the inputs, then the outputs.
using FusedElementwiseKernel = void (*)(const FusedProgram& program, Tensor* const* tensors);

}  // namespace trireme
