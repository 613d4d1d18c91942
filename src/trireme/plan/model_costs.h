// What one token costs in each piece of the model, learnt from the model's own ops: the planner
// runs a decoder block, and a one-block model for the embedding and head, forward and backward
// on a tiny real batch on the CPU under an OpCountScope (ops/op_count.h), at two widths and two
// vocabulary sizes, and fits the counts to how they grow with the shape:
//   block products    a d² + b d          per token, forward and backward
//   block attention   c T d               per token (T the sequence length)
//   block memory ops  e d + f             bytes per token (elementwise, layer norms)
//   head and embedding  h d V + k d       per token (the last stage's products)
// A layer whose costs grow otherwise would be mispredicted: the fit's residual at a third shape
// is kept (`fit_error`) and the planner reports it.
//
//   ModelCosts costs = measure_model_costs(tc.model, vocab);
//   double f = costs.block_flops_per_token(tc.model.d_model, tc.model.block_size);
#pragma once

#include <cstdint>

#include "trireme/io/config.h"

namespace trireme::plan {

struct ModelCosts {
  double block_mm_d2 = 0, block_mm_d = 0;      // a, b
  double block_attn_td = 0;                    // c
  double block_mem_d = 0, block_mem_1 = 0;     // e, f: f32 bytes
  double head_dv = 0, head_d = 0;              // h, k
  double head_mem_v = 0, head_mem_d = 0;       // bytes of the head's and loss's memory-bound ops
  double block_kernels = 0, head_kernels = 0;  // ops counted per forward and backward (launch overheads)
  double forward_share = 1.0 / 3;              // the forward's share of a block's products
  // What a full recomputation's replay runs again, as a share of a block's products: the forward
  // less what the backward does not read (autograd/checkpoint.h), without tensor parallelism
  // (whose all-reduces make the replay run the whole forward).
  double replay_share = 1.0 / 3;
  double fit_error = 0;                        // |predicted - counted| / counted at a shape not fitted

  double block_matmul_flops_per_token(double d) const { return block_mm_d2 * d * d + block_mm_d * d; }
  double block_attention_flops_per_token(double d, double T) const { return block_attn_td * T * d; }
  double block_flops_per_token(double d, double T) const {
    return block_matmul_flops_per_token(d) + block_attention_flops_per_token(d, T);
  }
  double block_memory_bytes_per_token(double d, double elt) const { return (block_mem_d * d + block_mem_1) * elt / 4; }
  double head_flops_per_token(double d, double V) const { return head_dv * d * V + head_d * d; }
  double head_memory_bytes_per_token(double d, double V, double elt) const {
    return (head_mem_v * V + head_mem_d * d) * elt / 4;
  }
};

// Measures the costs of the model `m` describes (its bias and layer structure; the widths come
// from the fit). Takes well under a second: the shapes are tiny.
ModelCosts measure_model_costs(const io::ModelConfig& m);

}  // namespace trireme::plan
