// Cluster descriptions: the TOML reader, the presets and this machine (see cluster.h).
#include "trireme/plan/cluster.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "trireme/io/config.h"
#include "trireme/io/toml_repaired.h"
#include "trireme/runtime/cpu_threads.h"

namespace trireme::plan {

double DeviceSpec::peak_flops(const std::string& precision) const {
  const double tflops = precision == "bf16" ? tflops_bf16 : precision == "f16" ? tflops_f16 : tflops_f32;
  return tflops * 1e12;
}

std::optional<AchievedRate> DeviceSpec::achieved_at(const std::string& recompute, double tokens) const {
  std::vector<const AchievedRate*> rates;
  for (const AchievedRate& r : achieved)
    if (r.recompute == recompute && r.tokens > 0) rates.push_back(&r);
  if (rates.empty()) return std::nullopt;
  std::sort(rates.begin(), rates.end(), [](const AchievedRate* a, const AchievedRate* b) { return a->tokens < b->tokens; });
  if (tokens <= rates.front()->tokens) return *rates.front();
  if (tokens >= rates.back()->tokens) return *rates.back();
  size_t i = 1;
  while (rates[i]->tokens < tokens) ++i;
  const AchievedRate &lo = *rates[i - 1], &hi = *rates[i];
  const double w = std::log(tokens / lo.tokens) / std::log(hi.tokens / lo.tokens);
  auto between = [w](double a, double b) { return a + w * (b - a); };
  return AchievedRate{recompute,
                      tokens,
                      between(lo.block_flops, hi.block_flops),
                      between(lo.head_flops, hi.head_flops),
                      between(lo.block_later_s, hi.block_later_s),
                      between(lo.head_later_s, hi.head_later_s),
                      between(lo.block_host_s, hi.block_host_s),
                      between(lo.head_host_s, hi.head_host_s)};
}

const LinkSpec& ClusterSpec::link_for(int64_t size, int64_t stride) const {
  return size * stride <= devices_per_node ? intra_node : inter_node;
}

std::string ClusterSpec::describe() const {
  auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  std::string out = str_cat(nodes, " node", nodes > 1 ? "s" : "", " x ", devices_per_node, " ", device.name, " (",
                            num(device.memory_gib), " GiB, ", num(device.tflops_bf16), " TFLOP/s bf16, ",
                            num(device.tflops_f32), " f32)");
  if (devices_per_node > 1) out += str_cat(", ", num(intra_node.bandwidth_gbs), " GB/s inside a node");
  if (nodes > 1) out += str_cat(", ", num(inter_node.bandwidth_gbs), " GB/s between nodes");
  return out;
}

namespace {

// Reads the fields of a description, collecting every problem before throwing.
class Reader {
 public:
  Reader(const toml::table& root, std::string source) : root_(root), source_(std::move(source)) {}

  // A number > 0 (>= 0 when zero_ok); nullopt after recording the problem, or when optional and absent.
  std::optional<double> number(const std::string& path, bool required, bool zero_ok = false) {
    const toml::node_view<const toml::node> node = root_.at_path(path);
    if (!node) {
      if (required) problem(path, "missing (expected a number)");
      return std::nullopt;
    }
    std::optional<double> v;
    if (auto i = node.as_integer()) v = double(i->get());
    if (auto f = node.as_floating_point()) v = f->get();
    if (!v || !std::isfinite(*v) || *v < 0 || (*v == 0 && !zero_ok)) {
      problem(path, str_cat("expected a number ", zero_ok ? ">= 0" : "> 0", ", got ", describe(*node.node()),
                            line(*node.node())));
      return std::nullopt;
    }
    return v;
  }
  std::optional<int64_t> count(const std::string& path) {
    const auto node = root_.at_path(path);
    if (!node) {
      problem(path, "missing (expected an integer >= 1)");
      return std::nullopt;
    }
    auto i = node.as_integer();
    if (!i || i->get() < 1 || i->get() > (int64_t(1) << 20)) {
      problem(path, str_cat("expected an integer from 1 to 1048576, got ", describe(*node.node()), line(*node.node())));
      return std::nullopt;
    }
    return i->get();
  }
  std::string text(const std::string& path, const std::string& fallback) {
    const auto node = root_.at_path(path);
    if (!node) return fallback;
    if (auto s = node.as_string()) return s->get();
    problem(path, str_cat("expected a string, got ", describe(*node.node()), line(*node.node())));
    return fallback;
  }
  void only(const std::string& table, const std::vector<std::string>& keys) {
    const toml::table* t = table.empty() ? &root_ : root_.at_path(table).as_table();
    if (t == nullptr) return;
    for (const auto& [k, v] : *t) {
      const std::string key(k.str());
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        problem(table.empty() ? key : table + "." + key,
                str_cat("unknown field", line(v), "; expected one of ", join(keys)));
      }
    }
  }
  void problem(const std::string& path, const std::string& what) {
    problems_ += str_cat(problems_.empty() ? "" : "\n", path, ": ", what);
  }
  void finish() const {
    if (!problems_.empty()) throw io::ConfigError(str_cat(source_, ": bad cluster description:\n", problems_));
  }

 private:
  std::string line(const toml::node& n) const { return str_cat(" (", source_, " line ", n.source().begin.line, ")"); }
  static std::string describe(const toml::node& n) {
    if (auto v = n.as_integer()) return std::to_string(v->get());
    if (auto v = n.as_floating_point()) {
      std::ostringstream s;
      s << v->get();
      return s.str();
    }
    if (auto v = n.as_string()) return "\"" + v->get() + "\"";
    if (auto v = n.as_boolean()) return v->get() ? "true" : "false";
    if (n.is_table()) return "a table";
    if (n.is_array()) return "an array";
    return "a date/time";
  }
  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
    return out;
  }
  const toml::table& root_;
  std::string source_, problems_;
};

// Presets: datasheet figures (dense, without sparsity; bandwidths one direction per GPU).
struct Preset {
  const char* name;
  DeviceSpec device;
  LinkSpec intra;
  int ib_gbits;  // the InfiniBand per GPU the vendor's 8-GPU systems ship with
  const char* source;
};

const std::vector<Preset>& presets() {
  // NVLink: H100/H200 SXM 900 GB/s, A100 SXM4 600 GB/s, both directions together; PCIe Gen4 x16:
  // 32 GB/s each way. Latencies are those NCCL's tuning model assumes per step, rounded up.
  static const std::vector<Preset> table = {
      {"h200-nvlink",
       {"H200-SXM-141GB", 141, 4800, 67, 989.5, 989.5},
       {450, 3},
       400,
       "NVIDIA H200 Tensor Core GPU datasheet (2024): 141 GB HBM3e, 4.8 TB/s, BF16/FP16 989.5 TFLOPS dense, "
       "FP32 67 TFLOPS, NVLink 900 GB/s; DGX H200: 8 x 400 Gb/s NDR InfiniBand"},
      {"h100-nvlink",
       {"H100-SXM5-80GB", 80, 3350, 67, 989.5, 989.5},
       {450, 3},
       400,
       "NVIDIA H100 Tensor Core GPU datasheet (2023): 80 GB HBM3, 3.35 TB/s, BF16/FP16 989.5 TFLOPS dense, "
       "FP32 67 TFLOPS, NVLink 900 GB/s; DGX H100: 8 x 400 Gb/s NDR InfiniBand"},
      {"a100-80gb-nvlink",
       {"A100-SXM4-80GB", 80, 2039, 19.5, 312, 312},
       {300, 3},
       200,
       "NVIDIA A100 Tensor Core GPU datasheet (2021): 80 GB HBM2e, 2,039 GB/s, BF16/FP16 312 TFLOPS dense, "
       "FP32 19.5 TFLOPS, NVLink 600 GB/s; DGX A100: 8 x 200 Gb/s HDR InfiniBand"},
      {"a100-40gb-nvlink",
       {"A100-SXM4-40GB", 40, 1555, 19.5, 312, 312},
       {300, 3},
       200,
       "NVIDIA A100 Tensor Core GPU datasheet (2021): 40 GB HBM2, 1,555 GB/s, BF16/FP16 312 TFLOPS dense, "
       "FP32 19.5 TFLOPS, NVLink 600 GB/s; DGX A100: 8 x 200 Gb/s HDR InfiniBand"},
      {"a100-pcie",
       {"A100-PCIe-80GB", 80, 1935, 19.5, 312, 312},
       {32, 10},
       200,
       "NVIDIA A100 Tensor Core GPU datasheet (2021): A100 80GB PCIe, 1,935 GB/s, BF16/FP16 312 TFLOPS dense, "
       "FP32 19.5 TFLOPS, PCIe Gen4 64 GB/s (32 each way), no NVLink bridge assumed"},
  };
  return table;
}

}  // namespace

ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(toml_text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw io::ConfigError(
        str_cat(source, " line ", e.source().begin.line, ", column ", e.source().begin.column, ": ", e.description()));
  }
  Reader r(root, source);
  r.only("", {"name", "nodes", "devices_per_node", "device", "intra_node", "inter_node", "efficiency"});
  r.only("device", {"name", "memory_gib", "memory_bandwidth_gbs", "tflops_f32", "tflops_bf16", "tflops_f16"});
  r.only("intra_node", {"bandwidth_gbs", "latency_us"});
  r.only("inter_node", {"bandwidth_gbs", "latency_us"});
  r.only("efficiency", {"matmul", "memory", "link", "dp_overlap", "launch_us"});
  ClusterSpec c;
  c.source = source;
  c.name = r.text("name", source);
  c.nodes = r.count("nodes").value_or(1);
  c.devices_per_node = r.count("devices_per_node").value_or(1);
  c.device.name = r.text("device.name", "device");
  c.device.memory_gib = r.number("device.memory_gib", true).value_or(0);
  c.device.memory_bandwidth_gbs = r.number("device.memory_bandwidth_gbs", true).value_or(0);
  c.device.tflops_f32 = r.number("device.tflops_f32", true).value_or(0);
  c.device.tflops_bf16 = r.number("device.tflops_bf16", true).value_or(0);
  c.device.tflops_f16 = r.number("device.tflops_f16", false).value_or(c.device.tflops_bf16);
  const bool intra = c.devices_per_node > 1, inter = c.nodes > 1;
  c.intra_node.bandwidth_gbs = r.number("intra_node.bandwidth_gbs", intra).value_or(0);
  c.intra_node.latency_us = r.number("intra_node.latency_us", intra, true).value_or(0);
  c.inter_node.bandwidth_gbs = r.number("inter_node.bandwidth_gbs", inter).value_or(0);
  c.inter_node.latency_us = r.number("inter_node.latency_us", inter, true).value_or(0);
  auto share = [&](const std::string& path, double fallback) {
    std::optional<double> v = r.number(path, false);
    if (v && *v > 1) {
      r.problem(path, str_cat("expected a share in (0, 1], got ", *v));
      return fallback;
    }
    return v.value_or(fallback);
  };
  c.efficiency.matmul = share("efficiency.matmul", c.efficiency.matmul);
  c.efficiency.memory = share("efficiency.memory", c.efficiency.memory);
  c.efficiency.link = share("efficiency.link", c.efficiency.link);
  c.efficiency.dp_overlap = share("efficiency.dp_overlap", c.efficiency.dp_overlap);
  c.efficiency.launch_us = r.number("efficiency.launch_us", false, true).value_or(c.efficiency.launch_us);
  r.finish();
  return c;
}

ClusterSpec load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw io::ConfigError(str_cat("--cluster: cannot read '", path, "'; give a TOML cluster description"));
  std::stringstream s;
  s << in.rdbuf();
  return parse_cluster(s.str(), path);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.push_back(p.name);
  return out;
}

ClusterSpec cluster_preset(const std::string& name, int64_t nodes) {
  std::string base = name;
  int ib = 0;
  for (int gbits : {200, 400}) {
    const std::string suffix = str_cat("-ib", gbits);
    if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
      base.resize(base.size() - suffix.size());
      ib = gbits;
    }
  }
  if (nodes < 1 || nodes > (int64_t(1) << 14))
    throw io::ConfigError(str_cat("--nodes: expected 1 to 16384 nodes, got ", nodes));
  for (const auto& p : presets()) {
    if (base != p.name) continue;
    ClusterSpec c;
    c.name = name;
    c.nodes = nodes;
    c.devices_per_node = 8;
    c.device = p.device;
    c.intra_node = p.intra;
    // One HCA per GPU: 200 Gb/s = 25 GB/s each way; a few microseconds through one switch.
    c.inter_node = {double(ib ? ib : p.ib_gbits) / 8, 5};
    c.source = p.source;
    return c;
  }
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw io::ConfigError(str_cat("--preset: unknown preset '", name, "'; the presets are ", names,
                                " (add -ib200 or -ib400 for the InfiniBand between nodes)"));
}

ClusterSpec this_machine_cluster(int64_t processes) {
  TRIREME_CHECK(processes >= 1, "this_machine_cluster: needs at least one process, got ", processes);
  const int cores = std::max(1, runtime::available_cpus());
  // The machine's total memory, not what is free now: every rank of a job plans alike.
  double memory = 8.0 * double(1ull << 30);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemTotal:") {
      memory = kib * 1024;
      break;
    }
    meminfo.ignore(1 << 10, '\n');
  }
  ClusterSpec c;
  c.name = "this machine";
  c.nodes = 1;
  c.devices_per_node = processes;
  c.device.is_cpu = true;
  c.device.name = str_cat("CPU process (", cores, " cores shared by ", processes, ")");
  // Processes share the cores and the memory. Default figures for a recent x86 core with AVX2
  // FMA (32 f32 FLOP per cycle at ~2.5 GHz); trireme plan --calibrate measures them instead.
  const double per_process_cores = std::max(1.0, double(cores) / double(processes));
  c.device.memory_gib = memory / double(processes) / double(1ull << 30);
  c.device.tflops_f32 = 80e-3 * per_process_cores;
  c.device.tflops_bf16 = c.device.tflops_f16 = c.device.tflops_f32 / 2;  // converted to f32 for the products
  c.device.memory_bandwidth_gbs = 10 * per_process_cores;
  c.intra_node = {2, 50};  // Gloo over loopback TCP
  c.efficiency = {.matmul = 0.5, .memory = 0.7, .link = 1.0, .dp_overlap = 0.5, .launch_us = 2};
  c.source = "default CPU figures (run trireme plan --calibrate to measure this machine)";
  return c;
}

}  // namespace trireme::plan
