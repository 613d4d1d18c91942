// oneDNN matmul primitives, one per key (thread count, types, shape, layouts, bias, accumulate),
// built on first use and kept (up to kMaxKept; then the set starts over, and oneDNN's own cache
// of generated code makes rebuilding cheap).
#include "trireme/kernels/cpu/onednn_gemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "trireme/core/error.h"
#include "trireme/kernels/cpu/loops.h"

namespace trireme::cpu {
namespace {

// A primitive also keeps the number of OpenMP threads it was built for (its work split), so the
// thread count is part of the key: a run that changes it gets primitives for the new count.
using Key = std::tuple<int, GemmType, GemmType, int64_t, int64_t, int64_t, bool, int64_t, bool, int64_t, int64_t, bool,
                       int64_t, bool>;

constexpr size_t kMaxKept = 1024;

struct Gemm {
  dnnl::memory::desc a, b, c, bias;
  dnnl::matmul primitive;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The memory layout of a rows x cols operand as oneDNN sees it: strides in elements.
dnnl::memory::desc operand_desc(GemmOperand op, int64_t rows, int64_t cols, dnnl::memory::data_type type) {
  const dnnl::memory::dims strides = op.trans ? dnnl::memory::dims{1, op.ld} : dnnl::memory::dims{op.ld, 1};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

dnnl::memory::data_type data_type(GemmType t) {
  return t == GemmType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

std::shared_ptr<const Gemm> gemm_for(GemmType input, GemmOperand a, GemmOperand b, GemmType output, int64_t ldc,
                                     int64_t m, int64_t n, int64_t k, bool bias, int64_t bias_stride, bool accumulate) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const Gemm>> cache;
  const Key key{num_threads(), input, output, m, n, k, a.trans, a.ld, b.trans, b.ld, ldc, bias, bias_stride, accumulate};
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const auto type = data_type(input);
  auto g = std::make_shared<Gemm>();
  Gemm& gemm = *g;
  gemm.a = operand_desc(a, m, k, type);
  gemm.b = operand_desc(b, k, n, type);
  gemm.c = dnnl::memory::desc({m, n}, data_type(output), dnnl::memory::dims{ldc, 1});
  if (bias) gemm.bias = dnnl::memory::desc({1, n}, data_type(output), dnnl::memory::dims{n * bias_stride, bias_stride});
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  try {
    dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(gemm.a, gemm.b, gemm.bias, gemm.c)
                                                   : dnnl::matmul::desc(gemm.a, gemm.b, gemm.c), attr, cpu_engine());
    gemm.primitive = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    TRIREME_FAIL("oneDNN cannot build a ", input == GemmType::bf16 ? "bf16" : "f32", " GEMM of ", m, "x", k, " by ", k,
                 "x", n, ": ", e.what());
  }
  if (cache.size() >= kMaxKept) cache.clear();
  cache.emplace(key, g);
  return g;
}

}  // namespace

void onednn_gemm(GemmType input, GemmOperand a, GemmOperand b, GemmType output, void* c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k, const void* bias, int64_t bias_stride, bool accumulate) {
  const std::shared_ptr<const Gemm> g =
      gemm_for(input, a, b, output, ldc, m, n, k, bias != nullptr, bias ? std::max<int64_t>(bias_stride, 1) : 0,
               accumulate);
  // oneDNN only reads a, b and the bias; its memory objects take non-const pointers.
  dnnl::memory ma(g->a, cpu_engine(), const_cast<void*>(a.ptr));
  dnnl::memory mb(g->b, cpu_engine(), const_cast<void*>(b.ptr));
  dnnl::memory mc(g->c, cpu_engine(), c);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(g->bias, cpu_engine(), const_cast<void*>(bias)));
  thread_local dnnl::stream stream(cpu_engine());
  g->primitive.execute(stream, args);
  stream.wait();
}

bool onednn_has_bf16_gemm() {
  static const bool has = [] {
    const dnnl::memory::desc a({2, 2}, dnnl::memory::data_type::bf16, dnnl::memory::dims{2, 1});
    const dnnl::memory::desc c({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::dims{2, 1});
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpu_engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return has;
}

std::string describe_gemm_kernels() {
  const dnnl_version_t* v = dnnl::version();
  std::string isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: isa = "AVX-512 with AMX (bf16 GEMMs on AMX tiles)"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "AVX-512 with BF16 instructions"; break;
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core: isa = "AVX-512"; break;
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx2: isa = "AVX2"; break;
    default: isa = "below AVX2: slow reference kernels"; break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         ", " + isa + (onednn_has_bf16_gemm() ? "" : "; bf16 GEMMs convert their inputs to f32");
}

}  // namespace trireme::cpu
