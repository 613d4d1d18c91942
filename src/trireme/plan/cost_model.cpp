// The step-time model of one layout (see cost_model.h).
#include "trireme/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "trireme/parallel/pipeline_partition.h"
#include "trireme/train/memory_estimate.h"

namespace trireme::plan {

double PlanInputs::vocab_size() const {
  return double(train::vocab_or_assumed(train, vocab));
}

double all_reduce_seconds(double bytes, int64_t size, const LinkSpec& link, double efficiency) {
  if (size <= 1 || bytes <= 0) return 0;
  const double p = double(size);
  return 2 * (p - 1) / p * bytes / (link.bandwidth_gbs * 1e9 * efficiency) + 2 * (p - 1) * link.latency_us * 1e-6;
}

double reduce_scatter_seconds(double bytes, int64_t size, const LinkSpec& link, double efficiency) {
  if (size <= 1 || bytes <= 0) return 0;
  const double p = double(size);
  return (p - 1) / p * bytes / (link.bandwidth_gbs * 1e9 * efficiency) + (p - 1) * link.latency_us * 1e-6;
}

double send_seconds(double bytes, const LinkSpec& link, double efficiency) {
  return bytes / (link.bandwidth_gbs * 1e9 * efficiency) + link.latency_us * 1e-6;
}

std::string link_name(const ClusterSpec& c, const LinkSpec& link) {
  if (&link == &c.inter_node) return "the links between nodes";
  return c.device.is_cpu ? "Gloo on this machine" : "the links inside a node";
}

PlanCost predict(const PlanInputs& in, const Layout& l) {
  io::TrainConfig tc = in.train;
  apply_layout(tc, l);
  const ClusterSpec& cl = in.cluster;
  const ModelCosts& mc = in.costs;
  const Efficiency& eff = cl.efficiency;
  const double d = double(tc.model.d_model), T = double(tc.model.block_size), V = in.vocab_size();
  const double elt = tc.train.precision == "f32" ? 4 : 2;
  const double tp = double(l.tp), m = double(l.micro_batches);
  const int64_t v = l.pp > 1 && l.schedule == "interleaved" ? l.virtual_stages : 1;
  const double tokens_mb = double(tc.train.batch_size) / (double(l.dp) * m) * T;
  const double flops_rate = cl.device.peak_flops(tc.train.precision) * eff.matmul;
  const double mem_rate = cl.device.memory_bandwidth_gbs * 1e9 * eff.memory;
  const bool sp = l.sequence_parallel && l.tp > 1;
  const bool recompute = l.recompute == "full";
  // What a replay adds (ModelCosts::replay_share): with tp, the whole forward.
  const double replay = l.tp > 1 ? mc.forward_share : mc.replay_share;

  PlanCost out;
  const auto ranks = train::estimate_training_memory_per_rank(tc, in.vocab);
  out.rank0_bytes = ranks.front().total();
  std::vector<double> stage_params(size_t(l.pp), 0);
  for (const auto& e : ranks) {
    out.peak_bytes = std::max(out.peak_bytes, e.total());
    if (e.dp_rank == 0 && e.tp_rank == 0) stage_params[size_t(e.pp_rank)] = e.parameters;
  }
  out.capacity_bytes = cl.device.memory_gib * double(1ull << 30) * (1 - in.memory_reserve);
  out.fits = out.peak_bytes <= out.capacity_bytes;

  // Per micro-batch, each pipeline rank: its blocks (over its chunks) and, on the last, the head.
  const LinkSpec& tp_link = cl.link_for(l.tp, 1);
  std::vector<int> layers(size_t(l.pp * v), 0);
  if (tc.model.n_layer >= l.pp * v) {
    const auto sizes = parallel::pipeline_partition_sizes(int(tc.model.n_layer), int(l.pp * v));
    std::copy(sizes.begin(), sizes.end(), layers.begin());
  }
  double slowest = 0, slowest_compute = 0, slowest_tp = 0, slowest_bwd = 0, slowest_host = 0;
  for (int64_t r = 0; r < l.pp; ++r) {
    // L blocks on this rank, R of them recomputed (memory.recompute_layers: the first of each chunk).
    double L = 0, R = 0;
    for (int64_t c = 0; c < v; ++c) {
      const double chunk = layers[size_t(c * l.pp + r)];
      L += chunk;
      if (l.recompute != "none") R += l.recompute_layers < 0 ? chunk : std::min(chunk, double(l.recompute_layers));
    }
    const double replayed_blocks = recompute ? R : 0;  // those whose forward runs twice
    const bool last = r == l.pp - 1;
    const double block_flops = mc.block_flops_per_token(d, T) / tp;
    double flops = (L + replayed_blocks * replay) * block_flops;
    if (last) flops += mc.head_flops_per_token(d, V) / tp;
    // Memory-bound work: sequence parallelism splits all of it; without, the layer norms and
    // residual adds (about half) are replicated over tp.
    const double mem_share = sp ? 1 / tp : (1 + 1 / tp) / 2;
    // Selective recomputation runs the norms and GELU once more: about a sixth of a block's
    // memory-bound traffic, no GEMM.
    const double replayed = recompute ? mc.forward_share : l.recompute == "selective" ? 1.0 / 6 : 0;
    double bytes = (L + R * replayed) * mc.block_memory_bytes_per_token(d, elt) * mem_share;
    if (last) bytes += mc.head_memory_bytes_per_token(d, V, elt) / tp;
    const double kernels = (L + replayed_blocks * mc.forward_share) * mc.block_kernels + (last ? mc.head_kernels : 0);
    double compute = tokens_mb * (flops / flops_rate + bytes / mem_rate) + kernels * eff.launch_us * 1e-6;
    // Calibrated: the rates measured at this size of micro-batch (a tp slice's products are those
    // of a micro-batch tp times smaller) hold all the work, recomputation's included when its mode
    // was measured; with tp the replay runs the whole forward, more than the measured one did.
    // The blocks not recomputed take the rate without recomputation.
    const std::optional<AchievedRate> plain = cl.device.achieved_at("none", tokens_mb / tp);
    std::optional<AchievedRate> rate = cl.device.achieved_at(l.recompute, tokens_mb / tp);
    double unmeasured_replay = l.tp > 1 && recompute ? (1 + mc.forward_share) / (1 + mc.replay_share) : 1;
    if (!rate) rate = plain, unmeasured_replay = recompute ? 1 + replay : 1;
    double host = 0;
    if (rate && plain) {
      const double head = last ? mc.head_flops_per_token(d, V) / tp : 0;
      compute = tokens_mb * ((L - R) * block_flops / plain->block_flops +
                             R * block_flops * unmeasured_replay / rate->block_flops + head / rate->head_flops);
      // The host queues every kernel of the micro-batch, replays included, whatever the tp share
      // (each rank queues its own): the micro-batch takes at least that long, also below the
      // smallest size measured, whose rate would price it by its FLOPs. In static mode a step is
      // replayed as CUDA graphs: the host's work is their launch.
      if (tc.train.mode != "static") host = (L + R * replayed) * plain->block_host_s + (last ? plain->head_host_s : 0);
      compute = std::max(compute, host);
      // A step's later micro-batches (m - 1 of the m) differ from its first: they add their
      // gradients into the earlier ones' and reuse its casts of the weights (a tp slice has 1/tp
      // of each). Not priced: with several processes the first adds too, into the Reducer's
      // zeroed buckets (one pass over the gradients a step); under ZeRO-3 the later ones cast again.
      const double later = (L * plain->block_later_s + (last ? plain->head_later_s : 0)) / tp;
      compute += later * (m - 1) / m;
    }
    // Two all-reduces forward and two backward per block (recomputation repeats the forward's);
    // the backward's overlap the weight-gradient products (a third of the block's products).
    double tp_s = 0;
    if (l.tp > 1) {
      const double one = all_reduce_seconds(tokens_mb * d * elt, l.tp, tp_link, eff.link);
      const double wgrad = tokens_mb * L * mc.block_matmul_flops_per_token(d) / tp / 3 / flops_rate;
      tp_s = one * (2 * L + 2 * replayed_blocks) + std::max(0.0, 2 * L * one - wgrad);
    }
    const double t = compute + tp_s;
    if (t > slowest) {
      slowest = t, slowest_compute = compute, slowest_tp = tp_s, slowest_host = host;
      slowest_bwd = compute * (1 - mc.forward_share);
    }
  }
  // The schedule: m micro-batches through the slowest stage, plus fill and drain.
  out.parts.compute = m * slowest_compute;
  out.host_s = m * slowest_host;
  // Nearly all of each micro-batch is the host queuing it: the GPU waits for launches.
  constexpr double kHostBound = 0.9;
  out.host_bound = slowest_host > 0 && slowest_host >= kHostBound * slowest_compute;
  out.parts.tp_comm = m * slowest_tp;
  out.parts.bubble = l.pp > 1 ? double(l.pp - 1) / double(v) * slowest : 0;
  if (l.pp > 1) {
    const LinkSpec& pp_link = cl.link_for(l.pp, l.tp);
    const double hops = 2 * (m * double(v) + double(l.pp) - 1);
    out.parts.pp_comm = hops * send_seconds(tokens_mb * d * elt, pp_link, eff.link);
  }

  // Data parallelism over the f32 gradients of the largest stage.
  const double params = *std::max_element(stage_params.begin(), stage_params.end());
  const LinkSpec& dp_link = cl.link_for(l.dp, l.tp * l.pp);
  const double grad_bytes = 4 * params;
  if (l.dp > 1) {
    const double hidden_behind = eff.dp_overlap * slowest_bwd;
    double reduce, after = 0;
    switch (l.zero_stage) {
      case 0:
        reduce = all_reduce_seconds(grad_bytes, l.dp, dp_link, eff.link);
        break;
      case 1:  // reduce-scatter the gradients; all-gather the updated parameters after the step
        reduce = reduce_scatter_seconds(grad_bytes, l.dp, dp_link, eff.link);
        after = reduce_scatter_seconds(grad_bytes, l.dp, dp_link, eff.link);
        break;
      case 2:  // as 1, but every micro-batch's backward reduce-scatters (no bucket outlives it)
        reduce = m * reduce_scatter_seconds(grad_bytes, l.dp, dp_link, eff.link);
        after = reduce_scatter_seconds(grad_bytes, l.dp, dp_link, eff.link);
        break;
      default:  // 3: and gather the parameters for every micro-batch's forward and backward
        reduce = reduce_scatter_seconds(grad_bytes, l.dp, dp_link, eff.link);
        after = 2 * m * reduce_scatter_seconds(params * elt, l.dp, dp_link, eff.link) * (1 - eff.dp_overlap);
        break;
    }
    out.parts.dp_comm = std::max(0.0, reduce - hidden_behind) + after;
  }
  // The optimizer reads parameter, gradient and state and writes parameter and state; the
  // gradient clipping reads the gradients once more.
  const double state = tc.optim.name == "adamw" ? 8 : (tc.optim.momentum > 0 ? 4 : 0);
  const double updated = params / (l.zero_stage >= 1 ? double(l.dp) : 1);
  out.parts.optimizer = cl.device.optimizer_s_per_parameter > 0
                            ? updated * cl.device.optimizer_s_per_parameter + cl.device.step_fixed_s
                            : updated * (4 + 4 + 4 + 2 * state + 4) / mem_rate;

  const StepParts& p = out.parts;
  out.step_s = p.compute + p.tp_comm + p.bubble + p.pp_comm + p.dp_comm + p.optimizer;
  out.tokens_per_s = double(tc.train.batch_size) * T / out.step_s;
  struct Part {
    double s;
    std::string name;
  };
  const std::vector<Part> named = {{p.compute, "compute"},
                                   {p.tp_comm, str_cat("tp all-reduces over ", link_name(cl, tp_link))},
                                   {p.bubble, "the pipeline bubble"},
                                   {p.pp_comm, str_cat("pipeline sends over ", link_name(cl, cl.link_for(l.pp, l.tp)))},
                                   {p.dp_comm, str_cat("dp gradient reduction over ", link_name(cl, dp_link))},
                                   {p.optimizer, "the optimizer step"}};
  const Part& top =
      *std::max_element(named.begin(), named.end(), [](const Part& a, const Part& b) { return a.s < b.s; });
  out.binding = &top == &named.front() && out.host_bound ? "the host's kernel launches" : top.name;
  return out;
}

}  // namespace trireme::plan
