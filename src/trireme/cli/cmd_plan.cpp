// `trireme plan --config FILE [--set key=value ...] [--cluster FILE | --preset NAME [--nodes N]]
// [--devices N] [--top K] [--explain] [--json] [--calibrate] [--measure K]`: the layouts a
// training config could run with on a cluster, ranked by predicted step time, with per-device
// memory and where the time goes (docs/PLANNER.md).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "trireme/cli/commands.h"
#include "trireme/cli/plan_measure.h"
#include "trireme/io/config.h"
#include "trireme/plan/calibrate.h"
#include "trireme/plan/planner.h"
#include "trireme/train/memory_check.h"

namespace trireme::cli {

namespace {

// How many of the plans that fit `--measure` draws its sample of the rest from.
constexpr int kMeasurePool = 1000;

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  std::string cluster_file, preset;
  int64_t nodes = 0, devices = 0, vocab = 0;
  int top = 5;
  bool explain = false, json = false, calibrate = false;
  int measure = 0;
  std::string profile;
  std::string calibrate_worker;  // hidden: a rank of the collectives' calibration, writing here
};

plan::ClusterSpec choose_cluster(const Options& opt, const io::TrainConfig& tc) {
  if (!opt.cluster_file.empty() && !opt.preset.empty())
    throw io::ConfigError("--cluster and --preset both describe the cluster; give one of them");
  if (opt.nodes > 0 && opt.preset.empty())
    throw io::ConfigError("--nodes applies to --preset (a --cluster file says its nodes itself)");
  if (!opt.cluster_file.empty()) return plan::load_cluster(opt.cluster_file);
  if (!opt.preset.empty()) return plan::cluster_preset(opt.preset, opt.nodes > 0 ? opt.nodes : 1);
  // This machine: CPU processes or its GPUs (train.device), calibrated figures when a profile for
  // this machine exists.
  const int64_t processes = opt.devices > 0 ? opt.devices : 2;
  const std::string device = plan::profile_device(tc);
  plan::ClusterSpec c =
      device == "cuda" ? plan::this_machine_gpus(processes, processes) : plan::this_machine_cluster(processes);
  const std::string path = opt.profile.empty() ? plan::default_profile_path(device) : opt.profile;
  if (auto profile = plan::load_profile(path, !opt.profile.empty(), device)) plan::apply_profile(c, *profile, processes);
  return c;
}

nlohmann::json plan_json(const plan::Plan& p) {
  const auto& l = p.layout;
  const auto& c = p.cost;
  return {{"layout",
           {{"dp", l.dp},
            {"tp", l.tp},
            {"pp", l.pp},
            {"micro_batches", l.micro_batches},
            {"schedule", l.schedule},
            {"virtual_stages", l.virtual_stages},
            {"sequence_parallel", l.sequence_parallel},
            {"zero_stage", l.zero_stage},
            {"recompute", l.recompute}}},
          {"overrides", l.overrides()},
          {"step_s", c.step_s},
          {"tokens_per_s", c.tokens_per_s},
          {"peak_bytes", c.peak_bytes},
          {"capacity_bytes", c.capacity_bytes},
          {"binding", c.binding},
          {"host_s", c.host_s},
          {"host_bound", c.host_bound},
          {"parts_s",
           {{"compute", c.parts.compute},
            {"tp_comm", c.parts.tp_comm},
            {"bubble", c.parts.bubble},
            {"pp_comm", c.parts.pp_comm},
            {"dp_comm", c.parts.dp_comm},
            {"optimizer", c.parts.optimizer}}}};
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", s * 1e3);
  return buf;
}

int run_plan(const Options& opt, const io::Config& cfg) {
  const io::TrainConfig tc = cfg.resolve();
  const plan::ClusterSpec cluster = choose_cluster(opt, tc);
  const int64_t devices = opt.devices > 0 ? opt.devices : cluster.devices();
  if (devices > cluster.devices())
    throw io::ConfigError(str_cat("--devices: ", devices, " devices, but the cluster has ", cluster.devices(), " (",
                                  cluster.describe(), "); lower --devices or add --nodes"));
  const plan::PlanInputs in =
      plan::plan_inputs(cfg, cluster, opt.vocab > 0 ? opt.vocab : run_vocab(tc).value_or(0));
  // With --measure, every plan that fits: its sample of the rest draws from them.
  const plan::SearchResult all = plan::search_plans(cfg, in, devices, opt.measure > 0 ? kMeasurePool : opt.top);
  plan::SearchResult r = all;
  if (r.plans.size() > size_t(opt.top)) r.plans.resize(size_t(opt.top));
  if (r.plans.empty()) {
    std::fprintf(stderr, "trireme plan: %s\n", r.impossible.c_str());
    return kExitUsage;
  }
  if (opt.json) {
    nlohmann::json j;
    j["cluster"] = {{"description", cluster.describe()}, {"source", cluster.source}, {"devices", devices}};
    j["examined"] = r.examined;
    j["unfit"] = r.unfit;
    j["invalid"] = r.invalid;
    j["search_seconds"] = r.seconds;
    j["model_fit_error"] = in.costs.fit_error;
    for (const auto& p : r.plans) j["plans"].push_back(plan_json(p));
    if (r.given) {
      j["given"] = plan_json(*r.given);
      j["given"]["fits"] = r.given->cost.fits;
      j["given"]["rank"] = r.given_rank;
    }
    if (opt.explain) j["explanation"] = plan::explain_plans(in, r, devices);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    const auto& m = tc.model;
    std::printf("cluster: %s, %lld used\n  figures: %s\n", cluster.describe().c_str(), (long long)devices,
                cluster.source.c_str());
    std::printf(
        "model: GPT d_model=%lld n_layer=%lld n_head=%lld block_size=%lld vocabulary %.0f; batch %lld "
        "sequences, precision %s, optimizer %s\n",
        (long long)m.d_model, (long long)m.n_layer, (long long)m.n_head, (long long)m.block_size, in.vocab_size(),
        (long long)tc.train.batch_size, tc.train.precision.c_str(), tc.optim.name.c_str());
    std::printf("  per token, counted from the model's ops: a block %.3g FLOP forward and backward, the head %.3g\n",
                in.costs.block_flops_per_token(double(m.d_model), double(m.block_size)),
                in.costs.head_flops_per_token(double(m.d_model), in.vocab_size()));
    std::printf("searched %lld layouts in %.2f s: %lld do not fit in memory\n\n", (long long)r.examined, r.seconds,
                (long long)r.unfit);
    std::printf("%-3s %-50s %10s %12s %11s %9s %8s %8s %8s %8s %8s\n", "#", "layout", "step ms", "tokens/s", "peak/dev",
                "compute", "tp", "bubble", "pp", "dp", "optim");
    for (size_t i = 0; i < r.plans.size(); ++i) {
      const auto& p = r.plans[i];
      const auto& c = p.cost;
      std::printf("%-3zu %-50s %10s %12.0f %11s %9s %8s %8s %8s %8s %8s\n", i + 1, p.layout.describe().c_str(),
                  ms(c.step_s).c_str(), c.tokens_per_s, train::format_bytes(c.peak_bytes).c_str(),
                  ms(c.parts.compute).c_str(), ms(c.parts.tp_comm).c_str(), ms(c.parts.bubble).c_str(),
                  ms(c.parts.pp_comm).c_str(), ms(c.parts.dp_comm).c_str(), ms(c.parts.optimizer).c_str());
    }
    if (r.given) {
      const auto& g = *r.given;
      std::printf("\nthe config's own layout, %s: %s ms per step, %.0f tokens/s, %s peak per device; %s\n",
                  g.layout.describe().c_str(), ms(g.cost.step_s).c_str(), g.cost.tokens_per_s,
                  train::format_bytes(g.cost.peak_bytes).c_str(),
                  !g.cost.fits        ? "it does not fit"
                  : r.given_rank == 1 ? "the best plan"
                                      : str_cat("#", r.given_rank, ", ", ms(g.cost.step_s - r.plans[0].cost.step_s),
                                                " ms slower than the best")
                                            .c_str());
    }
    std::printf("\nrun the best: --set %s", r.plans[0].layout.overrides()[0].c_str());
    for (size_t i = 1; i < r.plans[0].layout.overrides().size(); ++i)
      std::printf(" --set %s", r.plans[0].layout.overrides()[i].c_str());
    std::printf("\n");
    if (opt.explain) std::printf("\n%s", plan::explain_plans(in, r, devices).c_str());
  }
  if (opt.measure > 0) return measure_plans(opt.config, opt.overrides, r, all.plans, opt.measure);
  return kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand(
      "plan", "Choose how to split a training run over a cluster: layouts ranked by predicted step time");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set train.batch_size=64 (repeatable)");
  app->add_option("--cluster", opt->cluster_file, "a TOML cluster description (docs/PLANNER.md)");
  app->add_option("--preset", opt->preset,
                  "a built-in cluster: h200-nvlink, h100-nvlink, a100-80gb-nvlink, a100-40gb-nvlink, a100-pcie "
                  "(nodes of 8; add -ib200 or -ib400 for the InfiniBand between nodes)");
  app->add_option("--nodes", opt->nodes, "nodes of the --preset (default 1)")->check(CLI::Range(1, 16384));
  app->add_option("--devices", opt->devices,
                  "devices to plan for (default: the whole cluster; on this machine, CPU processes, default 2)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--vocab", opt->vocab,
                  "the vocabulary size (default: the prepared data's, else as trireme estimate assumes)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app->add_option("--top", opt->top, "how many plans to show (default 5)")->check(CLI::Range(1, 1000));
  app->add_flag("--explain", opt->explain, "say what binds the best plan and why the others lose");
  app->add_flag("--json", opt->json, "print the plans as JSON");
  app->add_flag("--calibrate", opt->calibrate,
                "measure this machine (GEMM throughput at the model's shapes, memory bandwidth, the model forward "
                "and backward and the collectives in 2 processes at once: Gloo on the CPU, NCCL between 2 GPUs "
                "with train.device = \"cuda\") and save the profile that plans for this machine then use");
  app->add_option("--profile", opt->profile,
                  "the calibration profile to write or read (default: " + plan::default_profile_path() + ")");
  app->add_option("--measure", opt->measure,
                  "run the top K plans and a sample of up to K others (the best of each other split, then of each "
                  "micro-batch count and recomputation mode) for a few steps each on this machine and print predicted "
                  "against measured step time and peak memory")
      ->check(CLI::Range(1, 32));
  app->add_option("--calibrate-worker", opt->calibrate_worker)->group("");  // a rank of --calibrate
  return {app, [opt] {
            try {
              io::Config cfg = opt->config.empty() ? io::Config::parse("", "defaults", opt->overrides)
                                                   : io::Config::load(opt->config, opt->overrides);
              if (!opt->calibrate_worker.empty())
                return plan::calibrate_worker(opt->calibrate_worker, cfg.resolve(), opt->vocab);
              if (opt->calibrate) {
                if (!opt->cluster_file.empty() || !opt->preset.empty())
                  throw io::ConfigError("--calibrate measures this machine; leave out --cluster and --preset");
                const io::TrainConfig tc = cfg.resolve();
                const std::string path =
                    opt->profile.empty() ? plan::default_profile_path(plan::profile_device(tc)) : opt->profile;
                std::vector<std::string> worker_args;  // the same config for the workers
                if (!opt->config.empty()) worker_args.insert(worker_args.end(), {"--config", opt->config});
                for (const auto& o : opt->overrides) worker_args.insert(worker_args.end(), {"--set", o});
                // The vocabulary the plans will use: the head's shape is measured with it.
                const int64_t vocab = opt->vocab > 0 ? opt->vocab : run_vocab(tc).value_or(0);
                if (vocab > 0) worker_args.insert(worker_args.end(), {"--vocab", std::to_string(vocab)});
                const plan::MachineProfile p = plan::calibrate_machine(tc, vocab, path, worker_args);
                std::printf("%s", plan::describe_profile(p).c_str());
                std::printf("profile written to %s\n", path.c_str());
                return kExitOk;
              }
              if (opt->measure > 0 && (!opt->cluster_file.empty() || !opt->preset.empty()))
                throw io::ConfigError("--measure runs the plans on this machine; leave out --cluster and --preset");
              return run_plan(*opt, cfg);
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme plan: config error:\n%s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
