// `trireme env`: what this build is and what it finds on this machine, for bug reports and
// for checking that the container image and the host agree.
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "trireme/cli/commands.h"
#include "trireme/core/container_image.h"
#include "trireme/kernels/cpu/loops.h"
#include "trireme/kernels/cpu/onednn_gemm.h"
#ifdef TRIREME_WITH_CUDA
#include "trireme/kernels/cuda/attention_cudnn.h"
#endif
#include "trireme/runtime/build_info.h"
#include "trireme/runtime/cpu_features.h"

namespace trireme::cli {
namespace {

std::string os_name() {
  std::ifstream f("/etc/os-release");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("PRETTY_NAME=", 0) == 0) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return "unknown";
}

}  // namespace

Command add_env_command(CLI::App& root) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* app = root.add_subcommand("env", "Report the build, libraries and hardware trireme sees");
  app->add_flag("--json", *as_json, "print JSON instead of a table");
  return {app, [as_json] {
            struct utsname u{};
            ::uname(&u);
            nlohmann::json j = runtime::build_info();
#ifdef TRIREME_WITH_CUDA
            j["cudnn"] = cuda_kernels::describe_cudnn_attention();
#else
            j["cudnn"] = "not built";
#endif
            j["os"] = os_name();
            const std::string image = container_image();
            j["image"] = image.empty() ? "none (not in a trireme container image)" : image;
            j["kernel"] = std::string(u.release);
            j["cpu"] = runtime::cpu_model_name();
            const runtime::CpuFeatures features = runtime::detect_cpu_features();
            j["cpu_vector_isa"] = runtime::describe_vector_isa(features) + " (OpenBLAS core for it: " +
                                  runtime::best_openblas_core(features) + ")";
            j["cpu_cores_online"] = ::sysconf(_SC_NPROCESSORS_ONLN);
            j["cpu_threads_used"] = cpu::num_threads();
            j["runtime"] = runtime::runtime_info();
            j["runtime"]["gemm_kernels"] =
                cpu::describe_gemm_kernels() + "; f64 and attention's small GEMMs: OpenBLAS";
            if (*as_json) {
              std::printf("%s\n", j.dump(2).c_str());
              return kExitOk;
            }
            for (auto it = j.begin(); it != j.end(); ++it) {
              if (it->is_object()) {
                for (auto in = it->begin(); in != it->end(); ++in) {
                  std::printf("%-22s %s\n", (it.key() + "." + in.key()).c_str(),
                              in->is_string() ? in->get<std::string>().c_str() : in->dump().c_str());
                }
              } else {
                std::printf("%-22s %s\n", it.key().c_str(), it->is_string() ? it->get<std::string>().c_str() : it->dump().c_str());
              }
            }
            return kExitOk;
          }};
}

}  // namespace trireme::cli
