#include "trireme/runtime/gpu_topology.h"

#include <dlfcn.h>

#include <array>
#include <vector>

#include "trireme/cuda/device.h"

#ifdef TRIREME_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace trireme::runtime {

std::string describe_gpu_pair(const GpuPairFacts& facts) {
  if (facts.nvlink) return "NVLink";
  switch (facts.pcie_common_ancestor) {
    case 0: return "PCIe, the same board";
    case 10: return "PCIe, one switch";
    case 20: return "PCIe, several switches";
    case 30: return "PCIe through the CPU's host bridge";
    case 40: return "PCIe through host bridges of one NUMA node";
    case 50: return "PCIe and the link between CPU sockets";
    default: return "unknown";
  }
}

#ifdef TRIREME_WITH_CUDA
namespace {

// The few NVML entry points and values used here, as the NVML API reference defines them.
// NVML is opened with dlopen rather than linked: the library ships with the driver, not the
// CUDA toolkit, and a machine without a driver must still run `trireme env`.
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlP2PCapsIndexNvlink = 2;
constexpr int kNvmlP2PStatusOk = 0;
constexpr unsigned kNvmlFeatureEnabled = 1;
constexpr unsigned kNvmlNvlinkDeviceTypeSwitch = 2;
constexpr unsigned kNvmlNvlinkMaxLinks = 18;  // Hopper's; older GPUs answer an error past theirs

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*nvlink_state)(NvmlDevice, unsigned, unsigned*) = nullptr;
  int (*nvlink_remote_device_type)(NvmlDevice, unsigned, unsigned*) = nullptr;
  int (*p2p_status)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
  int (*common_ancestor)(NvmlDevice, NvmlDevice, int*) = nullptr;

  ~Nvml() {
    if (shutdown) shutdown();
    if (lib) ::dlclose(lib);
  }
};

template <class Fn>
bool load(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  return fn != nullptr;
}

// Opens and initialises NVML; on failure returns why.
std::string open_nvml(Nvml& n) {
  n.lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) return std::string("NVML not found (libnvidia-ml.so.1, installed with the NVIDIA driver): ") + ::dlerror();
  if (!load(n.lib, "nvmlInit_v2", n.init) || !load(n.lib, "nvmlErrorString", n.error_string) ||
      !load(n.lib, "nvmlDeviceGetHandleByPciBusId_v2", n.handle_by_pci_bus_id) ||
      !load(n.lib, "nvmlDeviceGetNvLinkState", n.nvlink_state) ||
      !load(n.lib, "nvmlDeviceGetNvLinkRemoteDeviceType", n.nvlink_remote_device_type) ||
      !load(n.lib, "nvmlDeviceGetP2PStatus", n.p2p_status) ||
      !load(n.lib, "nvmlDeviceGetTopologyCommonAncestor", n.common_ancestor)) {
    return "this NVML lacks an entry point trireme uses (driver too old)";
  }
  if (const int rc = n.init(); rc != kNvmlSuccess) return std::string("NVML did not start: ") + n.error_string(rc);
  load(n.lib, "nvmlShutdown", n.shutdown);
  return "";
}

std::string describe_nvlinks(const Nvml& n, NvmlDevice d) {
  int active = 0, to_switch = 0;
  for (unsigned link = 0; link < kNvmlNvlinkMaxLinks; ++link) {
    unsigned state = 0;
    if (n.nvlink_state(d, link, &state) != kNvmlSuccess || state != kNvmlFeatureEnabled) continue;
    ++active;
    unsigned type = 0;
    if (n.nvlink_remote_device_type(d, link, &type) == kNvmlSuccess && type == kNvmlNvlinkDeviceTypeSwitch) ++to_switch;
  }
  if (active == 0) return "no NVLink active";
  std::string s = std::to_string(active) + " NVLinks active";
  if (to_switch == active) return s + ", to NVSwitches";
  if (to_switch == 0) return s + ", to GPUs directly";
  return s + " (" + std::to_string(to_switch) + " to NVSwitches)";
}

}  // namespace

nlohmann::json gpu_topology() {
  const int gpus = cuda::device_count();
  if (gpus == 0) return {{"unavailable", "no GPU usable: " + cuda::unavailable_reason()}};
  Nvml nvml;
  if (const std::string why = open_nvml(nvml); !why.empty()) return {{"unavailable", why}};

  std::vector<NvmlDevice> handles(size_t(gpus), nullptr);
  nlohmann::json links = nlohmann::json::object();
  for (int d = 0; d < gpus; ++d) {
    std::array<char, 32> bus_id{};
    if (cudaDeviceGetPCIBusId(bus_id.data(), int(bus_id.size()), d) != cudaSuccess ||
        nvml.handle_by_pci_bus_id(bus_id.data(), &handles[size_t(d)]) != kNvmlSuccess) {
      links[std::to_string(d)] = "unknown (NVML does not know this GPU's PCI address)";
      handles[size_t(d)] = nullptr;
      continue;
    }
    links[std::to_string(d)] = describe_nvlinks(nvml, handles[size_t(d)]);
  }
  nlohmann::json pairs = nlohmann::json::object();
  for (int a = 0; a < gpus; ++a) {
    for (int b = a + 1; b < gpus; ++b) {
      GpuPairFacts facts;
      NvmlDevice da = handles[size_t(a)], db = handles[size_t(b)];
      if (da && db) {
        int status = -1, level = -1;
        facts.nvlink = nvml.p2p_status(da, db, kNvmlP2PCapsIndexNvlink, &status) == kNvmlSuccess &&
                       status == kNvmlP2PStatusOk;
        if (nvml.common_ancestor(da, db, &level) == kNvmlSuccess) facts.pcie_common_ancestor = level;
      }
      pairs[std::to_string(a) + "-" + std::to_string(b)] = describe_gpu_pair(facts);
    }
  }
  return {{"links", links}, {"pairs", pairs}};
}
#else
nlohmann::json gpu_topology() { return {{"unavailable", "built without CUDA"}}; }
#endif

}  // namespace trireme::runtime
