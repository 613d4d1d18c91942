// The op-test harness: one OpCase per op (or variant); designated initialisers in field order. check_op() verifies
//   1. forward against a naive reference written with loops (f64),
//   2. backward against central finite differences in f64,
//   3. the same results from non-contiguous views of the inputs,
//   4. f32 and bf16 forwards against f64 (tolerances scaled to the dtype).
//
//   check_op({.name = "mul", .shapes = {{3, 1, 5}, {4, 5}},
//             .fn = [](const Inputs& x) { return mul(x[0], x[1]); },
//             .reference = [](const Inputs& x) { return naive_binary(x[0], x[1], std::multiplies<>()); }});
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/core/tensor.h"

namespace trireme::testing {

using Inputs = std::vector<Tensor>;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;                        // one per input (f64 random normal unless make_inputs)
  std::function<Inputs(Generator&)> make_inputs;    // custom f64 inputs (e.g. positive, integer ids)
  std::function<Tensor(const Inputs&)> fn;          // the op under test
  std::function<Tensor(const Inputs&)> reference;   // naive loops on contiguous f64 CPU inputs; may be empty
  std::vector<bool> differentiable;                 // per input; default: every floating input
  bool check_low_precision = true;                  // f32/bf16 forwards vs f64
  double fd_eps = 1e-6;
  double grad_atol = 1e-6, grad_rtol = 1e-5;
};

void check_op(const OpCase& c);

// Helpers for references and inputs.
Tensor random_f64(const Shape& shape, Generator& gen, double lo = -1.0, double hi = 1.0);
// A copy of t laid out non-contiguously (every other element of a larger buffer) with equal values.
Tensor noncontiguous_copy(const Tensor& t);
// max |a-b| / (atol + rtol |b|) <= 1, with a message naming the worst element.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol);

}  // namespace trireme::testing
