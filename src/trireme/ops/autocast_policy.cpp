// The autocast policy (Note [autocast policy] in ops/autocast_policy.h).
#include "trireme/ops/autocast_policy.h"

#include "trireme/autograd/autocast_mode.h"
#include "trireme/ops/copy.h"

namespace trireme {
namespace {

// The autocast dtype of the first defined argument's device type, when autocast is on there.
std::optional<DType> active_dtype(const std::vector<Tensor>& args) {
  for (const Tensor& t : args) {
    if (t.defined()) return autograd::autocast_dtype(t.device().type);
  }
  return std::nullopt;
}

bool is_16bit(DType d) { return d == DType::bf16 || d == DType::f16; }

// t cast to dtype, reusing a cast that the thread's cast cache kept (Note [autocast cast cache]
// in autograd/autocast_mode.h) or keeping this one there.
Tensor cast_once(const Tensor& t, DType dtype) {
  autograd::CastCache* cache = autograd::active_cast_cache();
  if (cache == nullptr || !cache->keeps(t)) return to_dtype(t, dtype);
  if (Tensor kept = cache->find(t, dtype); kept.defined()) return to_dtype_reusing(t, kept);
  Tensor cast = to_dtype(t, dtype);
  cache->keep(t, cast);
  return cast;
}

// Applies `target(dtype) -> dtype to cast to` to the floating arguments; nullopt if none changes.
// Casts go through `cast` (to_dtype, or cast_once for a low op's weights).
template <class Target, class Cast = Tensor (*)(const Tensor&, DType)>
AutocastArgs cast_where(const std::vector<Tensor>& args, Target target, Cast cast = &to_dtype) {
  bool any = false;
  for (const Tensor& t : args) any = any || (t.defined() && is_floating(t.dtype()) && target(t.dtype()) != t.dtype());
  if (!any) return std::nullopt;
  std::vector<Tensor> out;
  out.reserve(args.size());
  for (const Tensor& t : args) {
    out.push_back(t.defined() && is_floating(t.dtype()) ? cast(t, target(t.dtype())) : t);
  }
  return out;
}

// Width order for promotion: f64 > f32 > the 16-bit types (bf16 and f16 have no order).
int width(DType d) { return d == DType::f64 ? 3 : d == DType::f32 ? 2 : 1; }

}  // namespace

AutocastArgs autocast_low_args(const std::vector<Tensor>& args) {
  const std::optional<DType> low = active_dtype(args);
  if (!low) return std::nullopt;
  return cast_where(args, [&](DType d) { return d == DType::f32 || is_16bit(d) ? *low : d; }, &cast_once);
}

AutocastArgs autocast_f32_args(const std::vector<Tensor>& args) {
  if (!active_dtype(args)) return std::nullopt;
  return cast_where(args, [](DType d) { return is_16bit(d) ? DType::f32 : d; });
}

bool autocast_f32_result(const Tensor& t) {
  return t.defined() && is_16bit(t.dtype()) && active_dtype({t}).has_value();
}

AutocastArgs autocast_promote_args(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype() || !is_floating(a.dtype()) || !is_floating(b.dtype())) {
    return std::nullopt;
  }
  if (!active_dtype({a})) return std::nullopt;
  const DType wide = width(a.dtype()) > width(b.dtype())   ? a.dtype()
                     : width(b.dtype()) > width(a.dtype()) ? b.dtype()
                                                           : DType::f32;  // bf16 with f16
  return std::vector<Tensor>{to_dtype(a, wide), to_dtype(b, wide)};
}

}  // namespace trireme
