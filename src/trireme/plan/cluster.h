// A cluster as the planner sees it: nodes of identical devices, what one device computes and
// holds, and the links inside a node and between nodes. From a TOML file, a built-in preset of
// datasheet figures (docs/PLANNER.md lists them with their sources), or this machine's CPU.
//
//   ClusterSpec c = load_cluster("cluster.toml");               // io::ConfigError naming the field
//   ClusterSpec a = cluster_preset("a100-80gb-nvlink", 4);      // 4 nodes of 8, 200 Gb/s InfiniBand
//   ClusterSpec m = this_machine_cluster(2);                    // 2 CPU processes on this machine
//
// The file (every field required unless marked optional; bandwidths in GB/s = 1e9 bytes/s, one
// direction, per device):
//   name = "my cluster"                    # optional
//   nodes = 4
//   devices_per_node = 8
//   [device]
//   name = "A100-SXM4-80GB"                # optional
//   memory_gib = 80
//   memory_bandwidth_gbs = 2039
//   tflops_f32 = 19.5
//   tflops_bf16 = 312
//   tflops_f16 = 312                       # optional: tflops_bf16
//   [intra_node]                           # optional when devices_per_node = 1
//   bandwidth_gbs = 300
//   latency_us = 3
//   [inter_node]                           # optional when nodes = 1
//   bandwidth_gbs = 25
//   latency_us = 5
//   [efficiency]                           # optional: the share of peak the runtime achieves
//   matmul = 0.6                           # of tflops, by large products
//   memory = 0.7                           # of memory_bandwidth_gbs, by memory-bound kernels
//   link = 0.8                             # of the links' bandwidth, by collectives
//   dp_overlap = 0.8                       # of the data-parallel reduction hidden behind the backward
//   launch_us = 5                          # microseconds each op costs besides its work
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trireme::plan {

struct LinkSpec {
  double bandwidth_gbs = 0;  // one direction, per device, GB/s
  double latency_us = 0;     // per message
};

// What the model achieved in a calibration (plan/calibrate.h), forward and backward at one size
// of micro-batch under one recomputation mode: its counted FLOPs without recomputation over the
// time taken, so a replay's cost is inside the rate.
struct AchievedRate {
  std::string recompute;  // "none", "selective", "full"
  double tokens = 0;      // per micro-batch
  double block_flops = 0, head_flops = 0;  // FLOP/s of a decoder block, and of the embedding, head and loss
  // Seconds a later micro-batch of a step takes beyond its first, at this size, for a block and
  // for the rest: it adds its gradients into the earlier ones' (a kernel per parameter and its
  // traffic) and, under autocast, reuses the first one's casts of the weights (negative where the
  // casts saved outweigh the adds). Measured without recomputation and used for every mode; 0
  // where not measured.
  double block_later_s = 0, head_later_s = 0;
  // Seconds the host takes to queue a block's kernels, and the rest's, forward and backward at
  // this size (on a GPU; 0 on the CPU, where the host does the work). Where they come near the
  // time the run takes, the host sets the pace, not the device. Measured without recomputation.
  double block_host_s = 0, head_host_s = 0;
};

struct DeviceSpec {
  std::string name;
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;
  double tflops_f32 = 0, tflops_bf16 = 0, tflops_f16 = 0;  // dense peak
  bool is_cpu = false;                                     // processes share the machine's cores and memory
  // Measured by calibration (empty: not measured); in place of peak x efficiency and the
  // memory-bound and launch terms.
  std::vector<AchievedRate> achieved;
  // Measured by calibration too (0: not measured): what a training step costs besides the
  // model's forward and backward, as a fixed part and a part per parameter this process updates
  // (the gradient clipping and the optimizer).
  double step_fixed_s = 0, optimizer_s_per_parameter = 0;
  // The peak for train.precision ("f32", "bf16", "f16"), in FLOP/s.
  double peak_flops(const std::string& precision) const;
  // The calibrated rates under `recompute` at micro-batches of `tokens`, interpolated between the
  // measured sizes (in log tokens; the nearest outside them); nullopt when that mode was not
  // measured.
  std::optional<AchievedRate> achieved_at(const std::string& recompute, double tokens) const;
};

struct Efficiency {
  double matmul = 0.6, memory = 0.7, link = 0.8, dp_overlap = 0.8;
  double launch_us = 5;  // fixed cost of each op the model runs (kernel launch, dispatch)
};

struct ClusterSpec {
  std::string name;
  int64_t nodes = 1, devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node, inter_node;
  Efficiency efficiency;
  std::string source;  // where the figures come from (a file, a datasheet)

  int64_t devices() const { return nodes * devices_per_node; }
  // The link a group of `size` consecutive ranks `stride` apart crosses (the mesh is dp, pp, tp
  // with tp fastest): inside a node when the span size x stride fits in one.
  const LinkSpec& link_for(int64_t size, int64_t stride) const;
  std::string describe() const;  // "4 x 8 A100-SXM4-80GB (80 GiB, 312 TFLOP/s bf16), ..."
};

// Parses and validates a cluster description; `source` names it in errors. Every problem at once,
// one per line, each naming the field: io::ConfigError.
ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source = "cluster");
ClusterSpec load_cluster(const std::string& path);

// The built-in presets: a name of preset_names() (an "-ib200"/"-ib400" suffix picks the
// InfiniBand between nodes; the default is the fabric the vendor's 8-GPU systems ship with) on
// `nodes` nodes of 8. An unknown name: io::ConfigError listing the names.
ClusterSpec cluster_preset(const std::string& name, int64_t nodes = 1);
std::vector<std::string> preset_names();

// This machine as `processes` CPU processes sharing its cores and memory: default figures, or
// those of a calibration profile (plan/calibrate.h) when given.
ClusterSpec this_machine_cluster(int64_t processes);

}  // namespace trireme::plan
