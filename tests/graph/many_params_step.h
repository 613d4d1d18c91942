// A step of many small parameters for the multi-tensor AdamW tests (tests/graph and tests/cuda):
// f32 and bf16 parameters in two optimizers. The gradients stay allocated from step to step
// (zero_grad without freeing them), so no update frees memory, none is moved by scheduling for
// memory, and the pass merges them all (one call per dtype).
#pragma once

#include <string>
#include <vector>

#include "trireme/core/rng.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/reduce.h"
#include "trireme/optim/adamw.h"

namespace trireme::testing {

// 150 parameters of odd sizes, one in three bf16 (with f32 moments), alternately in two optimizers
// with their own learning rate, betas and weight decay. A step returns the loss (scaled by the
// input).
struct ManyParams {
  Device device;
  std::vector<Tensor> params;
  optim::AdamW first, second;

  static std::vector<Tensor> make(Device device) {
    Generator gen(11);
    std::vector<Tensor> out;
    for (int i = 0; i < 150; ++i) {
      const int64_t n = i == 5 ? 70001 : 1 + (i * 53) % 500;
      Tensor t = to_device(to_dtype(randn({n}, gen), i % 3 == 0 ? DType::bf16 : DType::f32), device);
      out.push_back(t.set_requires_grad(true));
    }
    return out;
  }
  static optim::NamedParams group(const std::vector<Tensor>& ps, int parity) {
    optim::NamedParams out;
    for (size_t i = 0; i < ps.size(); ++i) {
      if (int(i % 2) == parity) out.emplace_back("p" + std::to_string(i), ps[i]);
    }
    return out;
  }
  explicit ManyParams(Device d)
      : device(d),
        params(make(d)),
        first(group(params, 0), {.lr = 1e-2, .weight_decay = 0.1}),
        second(group(params, 1), {.lr = 3e-3, .betas = {0.9, 0.95}, .weight_decay = 0.0}) {}

  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    Tensor loss = zeros({1}, DType::f32, device);
    for (const Tensor& p : params) loss = add(loss, to_dtype(sum(mul(p, p)), DType::f32));
    loss = mul(loss, in[0]);
    sum(loss).backward();
    first.step();
    second.step();
    first.zero_grad(/*set_to_none=*/false);
    second.zero_grad(/*set_to_none=*/false);
    return {loss.detach()};
  }
};

}  // namespace trireme::testing
