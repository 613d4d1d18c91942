// Inputs, explanation and the parallel.auto choice (see planner.h).
#include "trireme/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

#include "trireme/core/device.h"
#include "trireme/dist/env.h"
#include "trireme/plan/calibrate.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/throughput.h"

namespace trireme::plan {

namespace {

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::abs(x) < 0.1 ? "%.1f%%" : "%.0f%%", 100 * x);
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof(buf), "%.2f s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.0f us", s * 1e6);
  return buf;
}

struct NamedPart {
  const char* name;
  double StepParts::*part;
};
const NamedPart kParts[] = {{"compute", &StepParts::compute},
                            {"tp all-reduces", &StepParts::tp_comm},
                            {"the pipeline bubble", &StepParts::bubble},
                            {"pipeline sends", &StepParts::pp_comm},
                            {"dp reduction", &StepParts::dp_comm},
                            {"the optimizer step", &StepParts::optimizer}};

// "+12 ms in tp all-reduces over the links between nodes (41% of its step)": where a plan loses
// most against the best.
std::string where_it_loses(const ClusterSpec& cl, const Plan& p, const PlanCost& best) {
  const PlanCost& c = p.cost;
  const Layout& l = p.layout;
  const NamedPart* worst = &kParts[0];
  double most = -1e300;
  for (const auto& part : kParts) {
    const double diff = c.parts.*(part.part) - best.parts.*(part.part);
    if (diff > most) most = diff, worst = &part;
  }
  std::string over;
  if (worst->part == &StepParts::tp_comm) over = " over " + link_name(cl, cl.link_for(l.tp, 1));
  if (worst->part == &StepParts::pp_comm) over = " over " + link_name(cl, cl.link_for(l.pp, l.tp));
  if (worst->part == &StepParts::dp_comm) over = " over " + link_name(cl, cl.link_for(l.dp, l.tp * l.pp));
  if (worst->part == &StepParts::compute && c.host_bound) over = ", bound by the host's kernel launches";
  return str_cat("+", seconds(most), " in ", worst->name, over, " (", percent(c.parts.*(worst->part) / c.step_s),
                 " of its step)");
}

int64_t largest_divisor_at_most(int64_t n, int64_t also_divides, int64_t cap) {
  for (int64_t t = std::min(n, cap); t >= 1; --t)
    if (n % t == 0 && also_divides % t == 0) return t;
  return 1;
}

}  // namespace

PlanInputs plan_inputs(const io::Config& config, const ClusterSpec& cluster, int64_t vocab) {
  PlanInputs in;
  in.train = config.resolve();
  in.vocab = vocab;
  in.cluster = cluster;
  // Counting runs the model's pieces: once per model structure in this process.
  static std::mutex mu;
  static std::map<std::pair<bool, bool>, ModelCosts> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(in.train.model.bias, in.train.model.tie_embeddings);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, measure_model_costs(in.train.model)).first;
  in.costs = it->second;
  return in;
}

std::string explain_plans(const PlanInputs& in, const SearchResult& r, int64_t devices) {
  if (r.plans.empty()) return r.impossible + "\n";
  const Plan& best = r.plans[0];
  const PlanCost& c = best.cost;
  std::string out = str_cat("The best plan, ", best.layout.describe(), ": ", seconds(c.step_s), " per step, bound by ",
                            c.binding, ".\n");
  out += str_cat("  memory: ", train::format_bytes(c.peak_bytes), " of ", train::format_bytes(c.capacity_bytes), " (",
                 percent(c.peak_bytes / c.capacity_bytes), ") per device");
  out += c.peak_bytes > 0.85 * c.capacity_bytes ? ": memory nearly binds too\n" : "\n";
  if (r.faster_unfit_count > 0)
    out += str_cat("  memory binds: ", r.faster_unfit_count, " faster layout",
                   r.faster_unfit_count > 1 ? "s do" : " does", " not fit\n");
  for (const auto& p : kParts) {
    const double s = c.parts.*(p.part);
    if (s > 0) out += str_cat("  ", p.name, ": ", seconds(s), " (", percent(s / c.step_s), ")\n");
  }
  if (c.host_bound) {
    out += str_cat("  the host binds: queuing the kernels takes ", seconds(c.host_s), " of the compute's ",
                   seconds(c.parts.compute), ", so the GPU waits for launches and the step follows the CPU's clock ",
                   "(train.mode = \"static\" replays a step as CUDA graphs)\n");
  } else if (c.host_s > 0) {
    out += str_cat("  of the compute, the host queuing the kernels: ", seconds(c.host_s), "\n");
  }
  for (size_t i = 1; i < r.plans.size(); ++i) {
    const Plan& p = r.plans[i];
    out += str_cat("#", i + 1, " ", p.layout.describe(), " is ", percent(p.cost.step_s / c.step_s - 1),
                   " slower: ", where_it_loses(in.cluster, p, c), "\n");
  }
  for (const Plan& p : r.faster_unfit) {
    out += str_cat("faster but does not fit: ", p.layout.describe(), " (", seconds(p.cost.step_s), ") needs ",
                   train::format_bytes(p.cost.peak_bytes), " per device\n");
  }
  // The splits people reach for first, each in its best variant (micro-batches, schedule, ZeRO,
  // recomputation).
  const io::TrainConfig& tc = in.train;
  struct Split {
    std::string name;
    int64_t dp, tp, pp;
  };
  std::vector<Split> known;
  known.push_back({"all data parallel", devices, 1, 1});
  const int64_t node = std::min(devices, in.cluster.devices_per_node);
  const int64_t tp_node = largest_divisor_at_most(tc.model.n_head, devices, node);
  if (tp_node > 1) known.push_back({str_cat("tp=", tp_node, " inside a node"), devices / tp_node, tp_node, 1});
  if (devices > in.cluster.devices_per_node) {
    const int64_t tp_wide = largest_divisor_at_most(tc.model.n_head, devices, devices);
    if (tp_wide > in.cluster.devices_per_node)
      known.push_back({str_cat("tp=", tp_wide, " across nodes"), devices / tp_wide, tp_wide, 1});
  }
  if (devices > 1) known.push_back({"all pipeline", 1, 1, devices});
  for (const Split& k : known) {
    const Plan* p = best_for_split(r, k.dp, k.tp, k.pp);
    if (p == nullptr) {
      out += str_cat(k.name, " (dp=", k.dp, " tp=", k.tp, " pp=", k.pp, ") is not a layout of this config: ",
                     k.pp > tc.model.n_layer ? str_cat("more stages than model.n_layer = ", tc.model.n_layer)
                     : tc.model.n_head % k.tp != 0
                         ? str_cat("tp does not divide model.n_head = ", tc.model.n_head)
                         : str_cat("dp does not divide train.batch_size = ", tc.train.batch_size),
                     "\n");
    } else if (p->layout == best.layout) {
      out += str_cat(k.name, " is the plan.\n");
    } else if (!p->cost.fits) {
      out += str_cat(k.name, " does not fit: its least, ", p->layout.describe(), ", needs ",
                     train::format_bytes(p->cost.peak_bytes), " per device\n");
    } else {
      out += str_cat(k.name, " at its best (", p->layout.describe(), ") is ", percent(p->cost.step_s / c.step_s - 1),
                     " slower: ", where_it_loses(in.cluster, *p, c), "\n");
    }
  }
  return out;
}

ClusterSpec cluster_for_training(const io::TrainConfig& tc, int64_t devices, int64_t devices_per_node) {
  const std::string device = profile_device(tc);
  ClusterSpec c = device == "cuda" ? this_machine_gpus(devices, devices_per_node) : this_machine_cluster(devices);
  // A profile of this machine, when there is one; a stale one is no reason to stop training.
  try {
    if (auto profile = load_profile(default_profile_path(device), false, device)) apply_profile(c, *profile, devices);
  } catch (const io::ConfigError&) {
  }
  return c;
}

ClusterSpec this_machine_gpus(int64_t devices, int64_t devices_per_node) {
  // A GPU the presets know by its CUDA name, else H100 figures with the device's own bf16 peak.
  const std::optional<train::PeakFlops> peak = train::device_peak_flops(Device::cuda(0));
  const std::string name = peak ? peak->device_name : "";
  const char* preset = name.find("H200") != std::string::npos ? "h200-nvlink"
                       : name.find("A100") != std::string::npos && name.find("40GB") != std::string::npos
                           ? "a100-40gb-nvlink"
                       : name.find("A100") != std::string::npos && name.find("PCIe") != std::string::npos ? "a100-pcie"
                       : name.find("A100") != std::string::npos ? "a100-80gb-nvlink"
                                                                : "h100-nvlink";
  const int64_t per_node = std::clamp<int64_t>(devices_per_node, 1, devices);
  ClusterSpec c = cluster_preset(preset, (devices + per_node - 1) / per_node);
  c.devices_per_node = per_node;
  if (peak && name.find("H100") == std::string::npos && std::string(preset) == "h100-nvlink") {
    c.device.name = name;
    c.device.tflops_bf16 = c.device.tflops_f16 = peak->flops / 1e12;
    c.source = str_cat("h100-nvlink figures with the ", name, "'s bf16 peak");
  }
  return c;
}

AutoPlan auto_plan(const io::Config& config, int64_t devices, int64_t vocab) {
  const io::TrainConfig tc = config.resolve();
  const dist::DistEnv env = dist::dist_env_from_environment();
  const int64_t per_node = env.world_size == devices ? env.local_world_size : devices;
  const PlanInputs in = plan_inputs(config, cluster_for_training(tc, devices, per_node), vocab);
  const SearchResult r = search_plans(config, in, devices, 1);
  if (r.plans.empty())
    throw io::ConfigError(str_cat("parallel.auto: ", r.impossible, "; run trireme plan for the details"));
  AutoPlan a;
  a.plan = r.plans[0];
  a.overrides = a.plan.layout.overrides();
  a.overrides.push_back("parallel.auto=false");
  char tps[64];
  std::snprintf(tps, sizeof(tps), "%.0f", a.plan.cost.tokens_per_s);
  a.log_line = str_cat("parallel.auto: ", a.plan.layout.describe(), " of ", r.examined, " layouts on ",
                       in.cluster.describe(), ": predicted ", seconds(a.plan.cost.step_s), " per step, ", tps,
                       " tokens/s, ", train::format_bytes(a.plan.cost.peak_bytes), " peak per device (bound by ",
                       a.plan.cost.binding, "; trireme plan --explain says why)");
  return a;
}

}  // namespace trireme::plan
