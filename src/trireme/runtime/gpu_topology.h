// How this machine's GPUs are connected, for `trireme env`: each GPU's active NVLinks (and
// whether they lead to an NVSwitch or straight to another GPU), and the link between each pair
// of GPUs. Read through NVML, which the NVIDIA driver installs (libnvidia-ml.so.1); it is
// loaded at run time, so a build or a machine without it still runs and says so.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace trireme::runtime {

// What NVML says of two GPUs: whether they reach each other over NVLink, and the closest point
// their PCIe paths share (NVML's topology levels: 0 the same board, 10 one PCIe switch, 20
// several switches, 30 the host bridge, 40 one NUMA node, 50 across CPU sockets).
struct GpuPairFacts {
  bool nvlink = false;
  int pcie_common_ancestor = -1;  // -1: unknown
};

// "NVLink", "PCIe, one switch", "PCIe through the CPU's host bridge", ...: the path data takes
// between the two GPUs.
std::string describe_gpu_pair(const GpuPairFacts& facts);

// Per GPU (CUDA's numbering, CUDA_VISIBLE_DEVICES applied) its NVLinks, and every pair's link:
//   {"links": {"0": "18 NVLinks active, to NVSwitches"}, "pairs": {"0-1": "NVLink"}}
// or {"unavailable": "<why>"} where NVML or CUDA cannot answer.
nlohmann::json gpu_topology();

}  // namespace trireme::runtime
