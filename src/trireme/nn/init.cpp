// Layout-independent initialisation: values drawn by (seed, name, index in the full parameter).
#include "trireme/nn/init.h"

#include "trireme/autograd/grad_mode.h"
#include "trireme/core/rng.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"

namespace trireme::nn {
namespace {

// Fills an f64 tensor of t's shape with draw(global_index), then copies it into t.
template <class Draw>
void fill_keyed(Tensor& t, const std::string& name, const Shape& full_shape_in, const Shape& offsets_in,
                const char* op, Draw&& draw) {
  TRIREME_CHECK(t.defined() && is_floating(t.dtype()), op, ": '", name, "' must be a defined floating tensor");
  const Shape& shape = t.sizes();
  const Shape full_shape = full_shape_in.empty() ? shape : full_shape_in;
  const Shape offsets = offsets_in.empty() ? Shape(shape.size(), 0) : offsets_in;
  TRIREME_CHECK(full_shape.size() == shape.size() && offsets.size() == shape.size(), op, ": '", name,
                "' shard shape ", shape, ", full shape ", full_shape, " and offsets ", offsets,
                " must have the same number of dims");
  for (size_t d = 0; d < shape.size(); ++d) {
    TRIREME_CHECK(offsets[d] >= 0 && offsets[d] + shape[d] <= full_shape[d], op, ": '", name, "' shard ", shape,
                  " at offsets ", offsets, " does not fit in the full shape ", full_shape);
  }
  const Shape full_strides = contiguous_strides(full_shape);
  const uint64_t stream = rng_stream_for(name);
  Tensor values = Tensor::empty(shape, DType::f64);
  double* out = values.data<double>();
  const int64_t n = values.numel();
  const int64_t nd = int64_t(shape.size());
  int64_t base = 0;
  for (int64_t d = 0; d < nd; ++d) base += offsets[d] * full_strides[d];
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    // i -> the shard's multi-index -> the full parameter's flat index.
    int64_t rem = i, global = base;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t k = rem % shape[d];
      rem /= shape[d];
      global += k * full_strides[d];
    }
    out[i] = draw(stream, uint64_t(global));
  }
  NoGradGuard no_grad;
  copy_(t, values.device() == t.device() ? values : to_device(values, t.device()));
}

}  // namespace

void init_normal(Tensor& t, double std, uint64_t seed, const std::string& name, const Shape& full_shape,
                 const Shape& shard_offsets, double mean) {
  fill_keyed(t, name, full_shape, shard_offsets, "init_normal", [&](uint64_t stream, uint64_t index) {
    return mean + std * rng_normal_f64(seed, stream, index);
  });
}

void init_uniform(Tensor& t, double low, double high, uint64_t seed, const std::string& name,
                  const Shape& full_shape, const Shape& shard_offsets) {
  fill_keyed(t, name, full_shape, shard_offsets, "init_uniform", [&](uint64_t stream, uint64_t index) {
    return low + (high - low) * rng_uniform_f64(seed, stream, index);
  });
}

void init_constant(Tensor& t, double value) {
  NoGradGuard no_grad;
  fill_(t, value);
}

}  // namespace trireme::nn
