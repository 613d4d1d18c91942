// The CUDA tests' op comparison: an op run on CPU and CUDA inputs made from the same random
// values, forward and backward (through the public ops and autograd), for each float dtype, with
// contiguous inputs and with transposed views.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/reduce.h"
#include "trireme/ops/view.h"

namespace trireme::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

enum class Domain { any, positive };

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;
  Fn fn;
  Domain domain = Domain::any;
  bool backward = true;
};

// Inputs made on the CPU from one generator, then copied: both devices see the same values.
// Transposed inputs are made in the swapped shape and transposed on each device separately,
// so the CUDA kernel really receives a strided view.
struct Inputs {
  std::vector<Tensor> leaves, views;
};

inline Inputs make_inputs(const OpCase& c, DType dtype, Device device, bool transposed, uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  for (const Shape& s : c.shapes) {
    const bool swap = transposed && s.size() >= 2;
    Shape made = s;
    if (swap) std::swap(made[made.size() - 1], made[made.size() - 2]);
    Tensor x = randn(made, gen, DType::f64);
    if (c.domain == Domain::positive) x = add(abs(x), 0.5);
    x = to_device(to_dtype(x, dtype), device).detach();
    x.set_requires_grad(c.backward);
    in.leaves.push_back(x);
    in.views.push_back(swap ? transpose(x, -1, -2) : x);
  }
  return in;
}

inline void check_cuda_op(const OpCase& c, std::vector<DType> dtypes = {DType::f64, DType::f32, DType::bf16, DType::f16}) {
  for (DType dtype : dtypes) {
    for (bool transposed : {false, true}) {
      const std::string what = c.name + " " + std::string(dtype_name(dtype)) + (transposed ? " transposed" : "");
      SCOPED_TRACE(what);
      Inputs cpu = make_inputs(c, dtype, Device::cpu(), transposed, 11);
      Inputs gpu = make_inputs(c, dtype, Device::cuda(0), transposed, 11);
      Tensor y_cpu = c.fn(cpu.views), y_gpu = c.fn(gpu.views);
      const double tol = tolerance_for(dtype);
      expect_close(y_gpu, y_cpu, tol, what + " forward");
      if (!c.backward || !y_cpu.requires_grad()) continue;
      // loss = sum(y * w) with a random w: every output element gets its own gradient.
      Generator gw(99);
      Tensor w = to_dtype(randn(y_cpu.sizes(), gw, DType::f64), dtype);
      sum(mul(y_cpu, w)).backward();
      sum(mul(y_gpu, to_device(w, Device::cuda(0)))).backward();
      for (size_t i = 0; i < cpu.leaves.size(); ++i) {
        // Inputs reached only through non-differentiable ops (a where's condition) get none.
        ASSERT_EQ(gpu.leaves[i].grad().defined(), cpu.leaves[i].grad().defined()) << what << " input " << i;
        if (!cpu.leaves[i].grad().defined()) continue;
        expect_close(gpu.leaves[i].grad(), cpu.leaves[i].grad(), 4 * tol, what + " grad of input " + std::to_string(i));
      }
    }
  }
}

}  // namespace trireme::testing
