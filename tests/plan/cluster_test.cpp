// Cluster descriptions: the TOML file, its refusals naming the field, the presets and this machine.
#include "trireme/plan/cluster.h"

#include <gtest/gtest.h>

#include "expect_error.h"
#include "trireme/io/config.h"

namespace trireme::plan {
namespace {

using testing::expect_error;

const char* kGood = R"(
name = "lab"
nodes = 2
devices_per_node = 4
[device]
name = "X100"
memory_gib = 40
memory_bandwidth_gbs = 1500
tflops_f32 = 20
tflops_bf16 = 300
[intra_node]
bandwidth_gbs = 200
latency_us = 3
[inter_node]
bandwidth_gbs = 25
latency_us = 6
[efficiency]
matmul = 0.5
)";

TEST(ClusterFile, ParsesEveryField) {
  const ClusterSpec c = parse_cluster(kGood, "lab.toml");
  EXPECT_EQ(c.name, "lab");
  EXPECT_EQ(c.devices(), 8);
  EXPECT_EQ(c.device.name, "X100");
  EXPECT_DOUBLE_EQ(c.device.memory_gib, 40);
  EXPECT_DOUBLE_EQ(c.device.peak_flops("bf16"), 300e12);
  EXPECT_DOUBLE_EQ(c.device.peak_flops("f16"), 300e12);  // defaults to bf16's
  EXPECT_DOUBLE_EQ(c.device.peak_flops("f32"), 20e12);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_gbs, 25);
  EXPECT_DOUBLE_EQ(c.efficiency.matmul, 0.5);
  EXPECT_DOUBLE_EQ(c.efficiency.link, Efficiency{}.link);
  // Groups inside a node use its links; wider ones cross nodes.
  EXPECT_EQ(&c.link_for(4, 1), &c.intra_node);
  EXPECT_EQ(&c.link_for(2, 4), &c.inter_node);
}

TEST(ClusterFile, MissingNegativeAndUnknownFieldsAreNamedAllAtOnce) {
  const std::string bad = R"(
nodes = 2
devices_per_node = 4
[device]
memory_gib = -40
tflops_f32 = "fast"
tflops_bf16 = 300
colour = "green"
[intra_node]
bandwidth_gbs = 200
latency_us = 3
)";
  EXPECT_THROW(parse_cluster(bad, "c.toml"), io::ConfigError);
  expect_error([&] { parse_cluster(bad, "c.toml"); },
               {"c.toml", "device.memory_gib: expected a number > 0, got -40 (c.toml line 5)",
                "device.memory_bandwidth_gbs: missing", "device.tflops_f32: expected a number > 0, got \"fast\"",
                "device.colour: unknown field", "inter_node.bandwidth_gbs: missing"});
}

TEST(ClusterFile, RefusesBadCountsSharesAndSyntax) {
  expect_error([] { parse_cluster("nodes = 0\ndevices_per_node = 1\n", "c"); }, "nodes: expected an integer from 1");
  std::string over = kGood;
  over += "link = 1.5\n";
  expect_error([&] { parse_cluster(over, "c"); }, "efficiency.link: expected a share in (0, 1], got 1.5");
  expect_error([] { parse_cluster("nodes = [", "c.toml"); }, "c.toml line 1");
  expect_error([] { load_cluster("/nonexistent/cluster.toml"); }, "cannot read '/nonexistent/cluster.toml'");
}

TEST(ClusterFile, OneNodeOneDeviceNeedsNoLinks) {
  const ClusterSpec c = parse_cluster(
      "nodes = 1\ndevices_per_node = 1\n[device]\nmemory_gib = 8\nmemory_bandwidth_gbs = 100\ntflops_f32 = 1\n"
      "tflops_bf16 = 2\n",
      "c");
  EXPECT_EQ(c.devices(), 1);
}

TEST(ClusterPreset, EveryPresetHasPositiveFiguresAndItsSource) {
  for (const auto& name : preset_names()) {
    const ClusterSpec c = cluster_preset(name, 4);
    EXPECT_EQ(c.devices(), 32) << name;
    EXPECT_GT(c.device.memory_gib, 0) << name;
    EXPECT_GT(c.device.peak_flops("bf16"), c.device.peak_flops("f32")) << name;
    EXPECT_GT(c.intra_node.bandwidth_gbs, c.inter_node.bandwidth_gbs) << name;
    EXPECT_NE(c.source.find("datasheet"), std::string::npos) << name;
  }
  for (const char* name : {"h200-nvlink", "h100-nvlink", "a100-80gb-nvlink", "a100-40gb-nvlink", "a100-pcie"})
    EXPECT_NO_THROW(cluster_preset(name)) << name;
}

TEST(ClusterPreset, InfiniBandSuffixPicksTheFabric) {
  EXPECT_DOUBLE_EQ(cluster_preset("a100-80gb-nvlink", 2).inter_node.bandwidth_gbs, 25);  // 200 Gb/s
  EXPECT_DOUBLE_EQ(cluster_preset("a100-80gb-nvlink-ib400", 2).inter_node.bandwidth_gbs, 50);
  EXPECT_DOUBLE_EQ(cluster_preset("h100-nvlink-ib200", 2).inter_node.bandwidth_gbs, 25);
  EXPECT_DOUBLE_EQ(cluster_preset("a100-40gb-nvlink").device.memory_gib, 40);
}

TEST(ClusterPreset, UnknownNameListsThePresets) {
  EXPECT_THROW(cluster_preset("v100"), io::ConfigError);
  expect_error([] { cluster_preset("v100"); }, {"unknown preset 'v100'", "h200-nvlink", "a100-pcie", "-ib400"});
  expect_error([] { cluster_preset("h100-nvlink", 0); }, "--nodes");
}

TEST(ThisMachine, ProcessesShareTheMachine) {
  const ClusterSpec one = this_machine_cluster(1), two = this_machine_cluster(2);
  EXPECT_TRUE(two.device.is_cpu);
  EXPECT_EQ(two.devices(), 2);
  EXPECT_NEAR(two.device.memory_gib * 2, one.device.memory_gib, 1e-9);
  EXPECT_GT(two.device.peak_flops("f32"), 0);
}

// Calibrated rates: per recomputation mode, interpolated in log tokens between the measured
// sizes, the nearest outside them.
TEST(AchievedRates, InterpolateInLogTokensAndClampOutside) {
  DeviceSpec dev;
  dev.achieved = {{"none", 4096, 200, 20}, {"none", 1024, 100, 10}, {"full", 4096, 150, 20}};
  EXPECT_DOUBLE_EQ(dev.achieved_at("none", 2048)->block_flops, 150);  // halfway in log2: 10 to 12
  EXPECT_DOUBLE_EQ(dev.achieved_at("none", 2048)->head_flops, 15);
  EXPECT_DOUBLE_EQ(dev.achieved_at("none", 512)->block_flops, 100);
  EXPECT_DOUBLE_EQ(dev.achieved_at("none", 1e6)->block_flops, 200);
  EXPECT_DOUBLE_EQ(dev.achieved_at("full", 64)->block_flops, 150);
  EXPECT_FALSE(dev.achieved_at("selective", 4096).has_value());
  EXPECT_FALSE(DeviceSpec{}.achieved_at("none", 4096).has_value());
}

}  // namespace
}  // namespace trireme::plan
