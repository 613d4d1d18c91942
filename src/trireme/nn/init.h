// Parameter initialisation that does not depend on the parallel layout.
//
// Every element's value is a pure function of (seed, the parameter's qualified name, the
// element's index in the FULL parameter), drawn with the counter-based RNG of core/rng.h. A shard
// of a parameter (a tensor-parallel slice, a ZeRO partition) is therefore initialised exactly as
// the same slice of the whole parameter, on whichever rank holds it. See DESIGN.md, "Layout
// equivalence".
//
//   init_normal(w, 0.02, seed, "transformer.h.0.attn.c_attn.weight");        // whole (2304, 768)
//   // rank r of 4 holding rows [576 r, 576 (r+1)) of the same parameter:
//   init_normal(shard, 0.02, seed, "transformer.h.0.attn.c_attn.weight", {2304, 768}, {576 * r, 0});
#pragma once

#include <cstdint>
#include <string>

#include "trireme/core/tensor.h"

namespace trireme::nn {

// Fills `t` (any dtype of floating point, any device, any layout) with mean + std * N(0, 1).
// `full_shape` is the whole parameter's shape (empty: t is the whole parameter) and
// `shard_offsets` t's starting index along each dim of it (empty: all zeros). Element
// (i_0, .., i_k) of t takes the draw of the full parameter's row-major index of
// (off_0 + i_0, .., off_k + i_k) in stream rng_stream_for(name).
void init_normal(Tensor& t, double std, uint64_t seed, const std::string& name, const Shape& full_shape = {},
                 const Shape& shard_offsets = {}, double mean = 0.0);
// Uniform in [low, high), same keying as init_normal.
void init_uniform(Tensor& t, double low, double high, uint64_t seed, const std::string& name,
                  const Shape& full_shape = {}, const Shape& shard_offsets = {});
// Constants need no keying.
void init_constant(Tensor& t, double value);

}  // namespace trireme::nn
