// `trireme train --config FILE [--set key=value ...] [--resume] [--nproc N [--max-restarts K]]`: train a GPT from a
// TOML config. With --nproc N it starts N copies of itself through the launcher (as `trireme
// launch --nproc-per-node N -- trireme train ...` would), each a rank of the [parallel] layout.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/dist/env.h"
#include "trireme/dist/launcher.h"
#include "trireme/io/config.h"
#include "trireme/train/progress.h"
#include "trireme/train/trainer.h"

namespace trireme::cli {

namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
  bool print_config = false;
  int nproc = 0;
  int max_restarts = 0;
};

std::string self_exe() {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return n > 0 ? std::string(exe, size_t(n)) : std::string("trireme");
}

// --nproc N: the same command minus --nproc on N local ranks.
int launch_ranks(const Options& opt, const io::TrainConfig& tc) {
  const io::ParallelConfig& par = tc.parallel;
  if (opt.nproc != par.world_size()) {
    throw io::ConfigError(str_cat("parallel: --nproc ", opt.nproc, " but the layout ", par.describe(),
                                  " needs dp x tp x pp = ", par.world_size(), " processes; use --nproc ",
                                  par.world_size(), ", or set [parallel] so that dp x tp x pp = ", opt.nproc,
                                  " (e.g. --set parallel.dp=", opt.nproc, ")"));
  }
  dist::LaunchOptions launch;
  launch.nproc_per_node = opt.nproc;
  launch.max_restarts = opt.max_restarts;
  launch.log_dir = tc.train.out_dir + "/logs";  // rank_<r>.log beside the run's metrics
  launch.command = {self_exe(), "train"};
  if (!opt.config.empty()) launch.command.insert(launch.command.end(), {"--config", opt.config});
  for (const auto& o : opt.overrides) launch.command.insert(launch.command.end(), {"--set", o});
  if (opt.resume) launch.command.push_back("--resume");
  return dist::launch_main(launch);
}

int run_training(const Options& opt, const io::Config& cfg) {
  if (opt.max_restarts > 0 && opt.nproc == 0) {
    throw io::ConfigError("--max-restarts restarts the ranks that --nproc starts; add --nproc N (under srun or "
                          "trireme launch, use their restart options instead)");
  }
  if (opt.nproc > 0) return launch_ranks(opt, cfg.resolve());
  // A restarted group (--max-restarts, a requeued Slurm job) continues from its latest checkpoint.
  const bool resume = opt.resume || dist::dist_env_from_environment().restart_count > 0;
  train::Trainer trainer(cfg, {.resume = resume, .interactive = train::Progress::stderr_is_terminal()});
  train::TrainSummary s = trainer.run();
  if (dist::dist_env_from_environment().rank != 0) return kExitOk;  // rank 0 reports for the job
  std::printf(
      "summary: %lld steps, %lld tokens in %.1f s (%.0f tokens/s); loss %.4f -> %.4f; best validation "
      "loss %.4f nats/token vs unigram baseline %.4f (vocabulary %lld, %lld parameters)\n"
      "         metrics %s, plot %s, checkpoint %s\n",
      (long long)s.steps, (long long)s.tokens, s.seconds, s.tokens_per_s, s.first_loss, s.final_loss, s.best_val_loss,
      s.unigram_entropy, (long long)s.vocab_size, (long long)s.num_parameters, s.metrics_path.c_str(),
      s.plot_path.c_str(), s.checkpoint_path.c_str());
  return kExitOk;
}

}  // namespace

Command add_train_command(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("train", "Train a GPT from a TOML config (see configs/ and --help)");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set optim.lr=3e-4 (repeatable)");
  app->add_flag("--resume", opt->resume, "continue from the latest checkpoint in train.out_dir");
  app->add_flag("--print-config", opt->print_config, "print the resolved config as TOML and exit");
  app->add_option("--nproc", opt->nproc,
                  "run N processes on this machine, one per rank of the [parallel] layout (N = dp x tp x pp); "
                  "a shortcut for trireme launch --nproc-per-node N -- trireme train ...")
      ->check(CLI::Range(1, 4096));
  app->add_option("--max-restarts", opt->max_restarts,
                  "with --nproc: when a rank fails, stop all and restart them up to K times, each restart "
                  "resuming from the latest checkpoint")
      ->check(CLI::Range(0, 1000));
  app->footer("Config keys:\n" + io::config_help());
  return {app, [opt] {
            io::Config cfg;
            try {
              cfg = opt->config.empty() ? io::Config::parse("", "defaults", opt->overrides)
                                        : io::Config::load(opt->config, opt->overrides);
              if (opt->print_config) {
                std::printf("%s", cfg.to_toml().c_str());
                return kExitOk;
              }
              return run_training(*opt, cfg);
            } catch (const io::ConfigError& e) {  // also found at run time: the world size
              std::fprintf(stderr, "trireme train: config error:\n%s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
