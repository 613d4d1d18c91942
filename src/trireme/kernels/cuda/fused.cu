// CUDA fused elementwise kernel: each program (kernels/fused.h) becomes CUDA C++ source, one
// thread per element (grid-stride): load the inputs, run the steps through the CUDA elementwise
// kernels' own device functions (elementwise_ops.cuh, whose text is embedded in the library),
// round each step to its dtype as the unfused kernel's store does, store the outputs. NVRTC
// compiles it for the device's architecture when the graph is optimised; kernels are cached by
// source and architecture.
#include <nvrtc.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "trireme/kernels/cuda/fused_headers.h"
#include "trireme/kernels/cuda/launch.cuh"
#include "trireme/kernels/fused.h"
#include "trireme/kernels/registry.h"

namespace trireme::cuda_kernels {
namespace {

struct CompiledFused {
  cudaLibrary_t library = nullptr;
  cudaKernel_t kernel = nullptr;
};

const char* device_type_name(DType t) {
  switch (t) {
    case DType::f64: return "double";
    case DType::f32: return "float";
    case DType::bf16: return "__nv_bfloat16";
    case DType::f16: return "__half";
    default: return nullptr;
  }
}
const char* acc_type_name(DType t) { return t == DType::f64 ? "double" : "float"; }

// The offset of element i of an input with the given strides, its dims coalesced; "i" when the
// input is the output's contiguous shape.
std::string offset_expression(const Shape& sizes, const Shape& strides) {
  if (strides == contiguous_strides(sizes)) return "i";
  Shape sz, st;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (!sz.empty() && st.back() == strides[d] * sizes[d]) {
      sz.back() *= sizes[d];
      st.back() = strides[d];
    } else {
      sz.push_back(sizes[d]);
      st.push_back(strides[d]);
    }
  }
  std::ostringstream os;
  os << "(0LL";
  std::string rest = "i";
  for (size_t d = sz.size(); d-- > 0;) {
    if (st[d] != 0) os << " + (" << rest << " % " << sz[d] << "LL) * " << st[d] << "LL";
    rest = "(" + rest + " / " + std::to_string(sz[d]) + "LL)";
  }
  os << ")";
  return os.str();
}

std::string kernel_source(const FusedProgram& p) {
  std::ostringstream os;
  // The unfused kernels store each step's result, so it is rounded before the next step reads
  // it: no multiply of one step may contract with an add of the next into an FMA. A bf16 or f16
  // step ends in a rounding conversion, which nothing contracts across; an f32 or f64 step's
  // result gets -0 added (x + -0 is x, -0 included), a kernel argument the compiler cannot
  // fold: its last multiply then contracts at most with that add, which rounds as the multiply.
  os << "#include \"trireme/kernels/cuda/elementwise_ops.cuh\"\n"
        "using namespace trireme::cuda_kernels;\n"
        "extern \"C\" __global__ void fused_kernel(long long n, float minus_zero_f, double minus_zero_d";
  for (int k = 0; k < p.inputs; ++k) os << ", const " << device_type_name(p.slot_dtype[size_t(k)]) << "* __restrict__ in" << k;
  for (size_t k = 0; k < p.outputs.size(); ++k)
    os << ", " << device_type_name(p.slot_dtype[size_t(p.outputs[k])]) << "* __restrict__ out" << k;
  os << ") {\n"
        "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {\n";
  for (int k = 0; k < p.inputs; ++k) {
    os << "    const " << acc_type_name(p.slot_dtype[size_t(k)]) << " s" << k << " = to_acc(in" << k << "["
       << offset_expression(p.sizes, p.input_strides[size_t(k)]) << "]);\n";
  }
  for (const FusedStep& s : p.steps) {
    const DType dt = p.slot_dtype[size_t(s.out)];
    const std::string d = device_type_name(dt), a = acc_type_name(dt);
    std::string value;
    if (s.op == PointwiseOp::copy) {
      value = a + "(s" + std::to_string(s.in[0]) + ")";
    } else if (is_unary(s.op)) {
      uint64_t bits;
      std::memcpy(&bits, &s.alpha, sizeof bits);
      char alpha[64];
      std::snprintf(alpha, sizeof alpha, "%s(__longlong_as_double(0x%016llxLL))", a.c_str(), (unsigned long long)bits);
      value = "apply_unary<" + a + ">(u_" + pointwise_op_name(s.op) + ", s" + std::to_string(s.in[0]) + ", " + alpha + ")";
    } else {
      value = "apply_binary<" + a + ">(b_" + pointwise_op_name(s.op) + ", s" + std::to_string(s.in[0]) + ", s" +
              std::to_string(s.in[1]) + ")";
    }
    const char* barrier = dt == DType::f32 ? " + minus_zero_f" : dt == DType::f64 ? " + minus_zero_d" : "";
    os << "    const " << a << " s" << s.out << " = to_acc(from_acc<" << d << ">(" << value << "))" << barrier << ";\n";
  }
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const int slot = p.outputs[k];
    os << "    out" << k << "[i] = from_acc<" << device_type_name(p.slot_dtype[size_t(slot)]) << ">(s" << slot << ");\n";
  }
  os << "  }\n}\n";
  return os.str();
}

// Compiles source for sm_<arch>; on failure returns null with the reason (NVRTC's log) in error.
std::shared_ptr<CompiledFused> compile(const std::string& source, int arch, std::string& error) {
  const std::vector<EmbeddedHeader>& headers = fused_headers();
  std::vector<const char*> texts, names;
  for (const EmbeddedHeader& h : headers) {
    texts.push_back(h.text);
    names.push_back(h.include_name);
  }
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, source.c_str(), "trireme_fused.cu", int(headers.size()), texts.data(), names.data()) !=
      NVRTC_SUCCESS) {
    error = "nvrtcCreateProgram failed";
    return nullptr;
  }
  const std::string arch_flag = "--gpu-architecture=sm_" + std::to_string(arch);
  std::vector<const char*> options = {arch_flag.c_str(), "-std=c++17"};
#ifdef TRIREME_CUDA_INCLUDE_DIR
  const std::string include = std::string("--include-path=") + TRIREME_CUDA_INCLUDE_DIR;  // cuda_bf16.h
  options.push_back(include.c_str());
#endif
  const nvrtcResult r = nvrtcCompileProgram(prog, int(options.size()), options.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 0) nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    error = str_cat("NVRTC: ", nvrtcGetErrorString(r), "\n", log);
    nvrtcDestroyProgram(&prog);
    return nullptr;
  }
  size_t cubin_size = 0;
  nvrtcGetCUBINSize(prog, &cubin_size);
  std::string cubin(cubin_size, '\0');
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  auto out = std::make_shared<CompiledFused>();
  cudaError_t e = cudaLibraryLoadData(&out->library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e == cudaSuccess) e = cudaLibraryGetKernel(&out->kernel, out->library, "fused_kernel");
  if (e != cudaSuccess) {
    error = str_cat("loading the compiled kernel: ", cudaGetErrorString(e));
    return nullptr;
  }
  return out;  // kept for the process's lifetime (the cache holds it)
}

void fused_prepare_cuda(FusedProgram& program, Device device, std::string& error) {
  error.clear();
  for (DType t : program.slot_dtype) {
    if (device_type_name(t) == nullptr) error = str_cat("a slot of dtype ", dtype_name(t));
  }
  if (!error.empty()) return;
  int major = 0, minor = 0;
  cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index);
  if (e != cudaSuccess) {
    error = str_cat("the compute capability of ", device, ": ", cudaGetErrorString(e));
    return;
  }
  const std::string source = kernel_source(program);
  const int arch = major * 10 + minor;
  static std::mutex mutex;
  static std::map<std::pair<std::string, int>, std::shared_ptr<CompiledFused>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<CompiledFused>& compiled = cache[{source, arch}];
  if (!compiled) compiled = compile(source, arch, error);
  if (!compiled) {
    cache.erase({source, arch});
    return;
  }
  program.compiled = compiled;
}

void fused_cuda(const FusedProgram& p, Tensor* const* tensors) {
  const int64_t n = shape_numel(p.sizes);
  if (n == 0) return;
  TRIREME_CHECK(p.compiled, "fused elementwise ", p.name, ": run before it was prepared");
  const auto& compiled = *static_cast<const CompiledFused*>(p.compiled.get());
  const size_t count = size_t(p.inputs) + p.outputs.size();
  std::vector<void*> pointers(count);
  std::vector<void*> params(count + 3);
  long long elements = n;
  float minus_zero_f = -0.0f;
  double minus_zero_d = -0.0;
  params[0] = &elements;
  params[1] = &minus_zero_f;
  params[2] = &minus_zero_d;
  for (size_t k = 0; k < count; ++k) {
    const Tensor& t = *tensors[k];
    // The kernel's index arithmetic is specialised on the traced layout.
    TRIREME_CHECK(k < size_t(p.inputs) ? t.strides() == p.input_strides[k] : t.is_contiguous(),
                  "fused elementwise ", p.name, ": tensor ", k, " has strides ", t.strides(), " unlike when traced");
    pointers[k] = t.data_ptr();
    params[k + 3] = &pointers[k];
  }
  LaunchContext ctx(*tensors[p.inputs]);
  TRIREME_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(compiled.kernel), dim3(grid_for(n)), dim3(kBlock),
                                      params.data(), 0, ctx.stream));
}

}  // namespace

TRIREME_REGISTER_KERNELS(cuda_fused) {
  registry.add_each<FusedPrepareKernel, double, float, bf16_t, f16_t>(
      "fused_prepare", DeviceType::cuda, []<class T>() { return &fused_prepare_cuda; });
  registry.add_each<FusedElementwiseKernel, double, float, bf16_t, f16_t>(
      "fused_elementwise", DeviceType::cuda, []<class T>() { return &fused_cuda; });
}

}  // namespace trireme::cuda_kernels
