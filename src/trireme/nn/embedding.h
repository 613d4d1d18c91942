// Embedding: a lookup table weight (num_embeddings, dim); ids (...) i64 -> (..., dim). Init N(0, 1).
//
//   nn::Embedding wte(50257, 768);
//   Tensor x = wte.forward(ids);   // ids (B, T) -> (B, T, 768)
#pragma once

#include "trireme/nn/module.h"

namespace trireme::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype = DType::f32);
  Tensor forward(const Tensor& ids) const;
  void reset_parameters(uint64_t seed) override;

  int64_t num_embeddings, dim;
  Tensor weight;  // (num_embeddings, dim)
};

}  // namespace trireme::nn
