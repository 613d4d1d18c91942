// CUDA copy (any strides, with dtype conversion) and fill kernels, the twins of
// kernels/cpu/copy.cpp. Same-dtype copies move bits (one kernel per element size, or a
// cudaMemcpyAsync when both sides are contiguous); converting copies read and write through a
// run-time dtype switch, so one kernel serves all 49 dtype pairs.
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/cuda/vector_map.cuh"
#include "trireme/kernels/elementwise.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

template <size_t Size>
using bits_of = std::conditional_t<Size == 8, uint64_t,
                std::conditional_t<Size == 4, uint32_t, std::conditional_t<Size == 2, uint16_t, uint8_t>>>;

// A value on its way between dtypes: doubles hold every f32/bf16/f16 value and integers up
// to 2^53 exactly; int64 -> int64 never comes here (same dtype moves bits).
__device__ __forceinline__ double load_as_double(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    default: return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
  }
}

// As the CPU does: through float for the 16-bit types (so f64 -> bf16 rounds twice, like there).
__device__ __forceinline__ void store_from_double(void* p, int64_t i, DType t, double v) {
  switch (t) {
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(float(v)); break;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(float(v)); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    default: static_cast<bool*>(p)[i] = v != 0.0; break;
  }
}

template <class Bits>
void copy_bits(const LaunchContext& ctx, const Tensor& src, Tensor& dst) {
  const Bits* x = static_cast<const Bits*>(src.data_ptr());
  Bits* o = static_cast<Bits*>(dst.data_ptr());
  launch_elementwise<2>(ctx, dst.sizes(), {&dst.strides(), &src.strides()},
                        [=] __device__(const int64_t(&off)[2]) { o[off[0]] = x[off[1]]; });
}

// Contiguous conversions between the floating types autocast moves between (f32 <-> bf16/f16),
// typed, without the double round trip and the per-element dtype switch of the general path.
template <class S, class Dst>
void convert_contiguous(const LaunchContext& ctx, const Tensor& src, Tensor& dst) {
  const device_t<S>* x = dptr<S>(src);
  device_t<Dst>* o = dptr<Dst>(dst);
  const void* none = nullptr;
  if (try_vector_map(ctx, dst.numel(), o, x, none, [] __device__(float v) { return v; })) return;
  const Shape flat{dst.numel()}, unit{1};
  launch_elementwise<2>(ctx, flat, {&unit, &unit}, [=] __device__(const int64_t(&off)[2]) {
    o[off[0]] = from_acc<device_t<Dst>>(float(to_acc(x[off[1]])));
  });
}

// True when it handled the copy.
bool try_fast_convert(const LaunchContext& ctx, const Tensor& src, Tensor& dst) {
  if (!src.is_contiguous() || !dst.is_contiguous()) return false;
  const DType s = src.dtype(), d = dst.dtype();
  if (s == DType::f32 && d == DType::bf16) return convert_contiguous<float, bf16_t>(ctx, src, dst), true;
  if (s == DType::f32 && d == DType::f16) return convert_contiguous<float, f16_t>(ctx, src, dst), true;
  if (s == DType::bf16 && d == DType::f32) return convert_contiguous<bf16_t, float>(ctx, src, dst), true;
  if (s == DType::f16 && d == DType::f32) return convert_contiguous<f16_t, float>(ctx, src, dst), true;
  return false;
}

template <class T>
void copy_cuda(const Tensor& src, Tensor& dst) {
  if (dst.numel() == 0) return;
  TRIREME_CHECK(src.device() == dst.device(), "copy (CUDA kernel): ", src.device(), " to ", dst.device(),
                " is a cross-device copy");
  LaunchContext ctx(dst);
  if (src.dtype() == dst.dtype()) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      TRIREME_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), size_t(dst.numel()) * sizeof(T),
                                         cudaMemcpyDeviceToDevice, ctx.stream));
    } else {
      copy_bits<bits_of<sizeof(T)>>(ctx, src, dst);
    }
    return;
  }
  if (try_fast_convert(ctx, src, dst)) return;
  const void* x = src.data_ptr();
  void* o = dst.data_ptr();
  const DType st = src.dtype(), dt = dst.dtype();
  launch_elementwise<2>(ctx, dst.sizes(), {&dst.strides(), &src.strides()}, [=] __device__(const int64_t(&off)[2]) {
    store_from_double(o, off[0], dt, load_as_double(x, off[1], st));
  });
}

template <class T>
void fill_cuda(Tensor& out, double value) {
  if (out.numel() == 0) return;
  // Converted on the host exactly as the CPU kernel converts it, then written as bits.
  using Bits = bits_of<sizeof(T)>;
  const T v = T(acc_t<T>(value));
  Bits bits;
  std::memcpy(&bits, &v, sizeof(T));
  LaunchContext ctx(out);
  if (bits == 0 && out.is_contiguous()) {  // zeroing (gradients, optimizer state): a memset
    TRIREME_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, size_t(out.numel()) * sizeof(T), ctx.stream));
    return;
  }
  Bits* o = static_cast<Bits*>(out.data_ptr());
  launch_elementwise<1>(ctx, out.sizes(), {&out.strides()}, [=] __device__(const int64_t(&off)[1]) { o[off[0]] = bits; });
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_copy) {
  registry.add_each<CopyKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "copy", DeviceType::cuda, []<class T>() { return &copy_cuda<T>; });
  registry.add_each<FillKernel, double, float, bf16_t, f16_t, int64_t, int32_t, bool>(
      "fill", DeviceType::cuda, []<class T>() { return &fill_cuda<T>; });
}

}  // namespace trireme::cuda_kernels
