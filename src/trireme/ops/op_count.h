// Counting what the ops compute while they run: floating-point operations and the bytes their
// operands and results occupy, for the matrix products and attention (the ops whose cost grows
// with the model's width), and the bytes the memory-bound ops (elementwise arithmetic through
// binary/unary dispatch, layer norms) read and write, as the ops dispatch them. The planner runs a model's pieces under
// a scope to learn their costs from the ops themselves rather than from a formula per architecture.
//
//   OpCounts counts;
//   {
//     OpCountScope scope(counts);          // this thread's ops, forward and backward, add to counts
//     Tensor loss = block.forward(x).sum();
//     loss.backward();
//   }
//   counts.matmul_flops;                    // 2 M N K per product, the backward's too
//
// Scopes nest: an inner scope counts and so does every scope around it. Without a scope the
// ops do nothing but test one thread-local pointer.
#pragma once

#include <cstdint>

namespace trireme {

struct OpCounts {
  double matmul_flops = 0;     // 2 M N K per (batched) product: matmul, linear, addmm
  double matmul_bytes = 0;     // operands read and result written
  double attention_flops = 0;  // the attention's products (causal: the half it computes)
  double attention_bytes = 0;  // q, k, v, output (and their gradients in the backward)
  double memory_bytes = 0;     // memory-bound ops (elementwise, layer norms): bytes read and written
  int64_t matmul_calls = 0, attention_calls = 0, memory_calls = 0;

  double flops() const { return matmul_flops + attention_flops; }
  double bytes() const { return matmul_bytes + attention_bytes; }
};

class OpCountScope {
 public:
  explicit OpCountScope(OpCounts& counts);
  ~OpCountScope();
  OpCountScope(const OpCountScope&) = delete;
  OpCountScope& operator=(const OpCountScope&) = delete;

 private:
  OpCounts* counts_;
  OpCountScope* outer_;
  friend void op_count_matmul(double, double);
  friend void op_count_attention(double, double);
  friend void op_count_memory(double);
};

// Called by the ops as they dispatch; nothing happens outside a scope.
void op_count_matmul(double flops, double bytes);
void op_count_attention(double flops, double bytes);
void op_count_memory(double bytes);

}  // namespace trireme
