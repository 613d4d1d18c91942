// `trireme env` names the link between each pair of GPUs (NVLink, or the PCIe path) and each
// GPU's NVLinks; where there is no GPU or no NVML it says why instead of failing.
#include <gtest/gtest.h>

#include "run_command.h"

#include "trireme/runtime/gpu_topology.h"

namespace trireme::runtime {
namespace {

TEST(GpuTopology, NvlinkWinsOverThePciePath) {
  EXPECT_EQ(describe_gpu_pair({.nvlink = true, .pcie_common_ancestor = 50}), "NVLink");
  EXPECT_EQ(describe_gpu_pair({.nvlink = false, .pcie_common_ancestor = 10}), "PCIe, one switch");
}

TEST(GpuTopology, EveryPciePathHasItsOwnName) {
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 0}), "PCIe, the same board");
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 20}), "PCIe, several switches");
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 30}), "PCIe through the CPU's host bridge");
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 40}), "PCIe through host bridges of one NUMA node");
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 50}), "PCIe and the link between CPU sockets");
  EXPECT_EQ(describe_gpu_pair({}), "unknown");
  EXPECT_EQ(describe_gpu_pair({.pcie_common_ancestor = 7}), "unknown");
}

TEST(GpuTopology, WithoutGpusItSaysWhy) {
  const nlohmann::json t = gpu_topology();
  if (!t.contains("unavailable")) GTEST_SKIP() << "GPUs visible: the CUDA test checks the links";
  EXPECT_FALSE(t["unavailable"].get<std::string>().empty());
  const cli_testing::Result r = cli_testing::run(std::string("env --json"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"gpu_links\""), std::string::npos) << r.out;
}

}  // namespace
}  // namespace trireme::runtime
