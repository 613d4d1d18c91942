// `trireme train --config FILE [--set key=value ...] [--resume | --overwrite] [--nproc N
// [--max-restarts K]]`: train a GPT from a TOML config. With --nproc N it starts N copies of itself
// through the launcher (as `trireme launch --nproc-per-node N -- trireme train ...` would), each a
// rank of the [parallel] layout; with no layout configured, --nproc N means data parallelism over
// N processes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "trireme/cli/commands.h"
#include "trireme/cli/plan_measure.h"
#include "trireme/dist/env.h"
#include "trireme/dist/launcher.h"
#include "trireme/io/config.h"
#include "trireme/plan/planner.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/progress.h"
#include "trireme/train/run_dir.h"
#include "trireme/train/trainer.h"

namespace trireme::cli {

namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
  bool overwrite = false;
  std::string init_from;
  bool print_config = false;
  bool force = false;
  int nproc = 0;
  int max_restarts = 0;
  std::optional<plan::AutoPlan> auto_plan;  // parallel.auto's choice, to set beside the run
};

// parallel.auto: the plan's prediction beside what the run measured (rank 0's metrics).
void report_auto_plan(const Options& opt, const io::TrainConfig& tc) {
  if (!opt.auto_plan) return;
  const MeasuredRun m = measured_run((std::filesystem::path(tc.train.out_dir) / "metrics.jsonl").string());
  std::fprintf(stderr, "parallel.auto: %s\n", prediction_against_run(opt.auto_plan->plan, m).c_str());
}

std::string self_exe() {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return n > 0 ? std::string(exe, size_t(n)) : std::string("trireme");
}

// --nproc N: the same command minus --nproc on N local ranks.
int launch_ranks(const Options& opt, const io::TrainConfig& tc) {
  const io::ParallelConfig& par = tc.parallel;
  // Refused here too (rank 0 would refuse as well), so the answer is one line, not a failed job.
  const std::filesystem::path out_dir = tc.train.out_dir;
  if (auto pid = train::run_lock_holder(out_dir)) {
    throw train::RunRefused(str_cat("train.out_dir '", out_dir.string(), "' is in use by another trainer (pid ", *pid,
                                    "); wait for it to finish, stop it, or use another train.out_dir"));
  }
  if (!opt.resume && !opt.overwrite) {
    if (auto what = train::earlier_run(out_dir)) throw train::RunRefused(train::earlier_run_refusal(out_dir, *what));
  }
  std::vector<std::string> overrides = opt.overrides;
  for (auto& o : nproc_overrides(par, opt.nproc)) {
    std::fprintf(stderr, "parallel: no [parallel] layout given, so --nproc %d means data parallel: dp = %d\n", opt.nproc,
                 opt.nproc);
    overrides.push_back(std::move(o));
  }
  dist::LaunchOptions launch;
  launch.nproc_per_node = opt.nproc;
  launch.max_restarts = opt.max_restarts;
  launch.log_dir = tc.train.out_dir + "/logs";  // rank_<r>.log beside the run's metrics
  launch.command = {self_exe(), "train"};
  if (!opt.config.empty()) launch.command.insert(launch.command.end(), {"--config", opt.config});
  for (const auto& o : overrides) launch.command.insert(launch.command.end(), {"--set", o});
  if (opt.resume) launch.command.push_back("--resume");
  if (opt.overwrite) launch.command.push_back("--overwrite");
  if (!opt.init_from.empty()) launch.command.insert(launch.command.end(), {"--init-from", opt.init_from});
  return dist::launch_main(launch);
}

// parallel.auto: the planner's best layout for the processes this run has (--nproc N, else the
// launcher's world size), logged with its prediction; every rank plans alike (the same inputs).
io::Config apply_auto_layout(Options& opt, const io::Config& cfg) {
  const dist::DistEnv env = dist::dist_env_from_environment();
  const int64_t devices = opt.nproc > 0 ? opt.nproc : env.world_size;
  const plan::AutoPlan a = plan::auto_plan(cfg, devices, run_vocab(cfg.resolve()).value_or(0));
  if (env.rank == 0) std::fprintf(stderr, "%s\n", a.log_line.c_str());
  for (const auto& o : a.overrides) opt.overrides.push_back(o);
  opt.auto_plan = a;
  return opt.config.empty() ? io::Config::parse("", "defaults", opt.overrides)
                            : io::Config::load(opt.config, opt.overrides);
}

int run_training(const Options& opt, const io::Config& cfg) {
  if (opt.max_restarts > 0 && opt.nproc == 0) {
    throw io::ConfigError("--max-restarts restarts the ranks that --nproc starts; add --nproc N (under srun or "
                          "trireme launch, use their restart options instead)");
  }
  if (opt.nproc > 0) {
    const int status = launch_ranks(opt, cfg.resolve());
    if (status == kExitOk) report_auto_plan(opt, cfg.resolve());
    return status;
  }
  // A restarted group (--max-restarts, a requeued Slurm job) continues from its latest checkpoint,
  // never removing what the first attempt wrote.
  const bool restarted = dist::dist_env_from_environment().restart_count > 0;
  train::Trainer trainer(cfg, {.resume = opt.resume || restarted,
                               .overwrite = opt.overwrite && !restarted,
                               .interactive = train::Progress::stderr_is_terminal(),
                               .init_from = opt.init_from});
  train::TrainSummary s = trainer.run();
  if (dist::dist_env_from_environment().rank != 0) return kExitOk;  // rank 0 reports for the job
  if (s.already_finished) {
    std::printf("%s\n", s.message.c_str());
    return kExitOk;
  }
  report_auto_plan(opt, cfg.resolve());
  if (!s.labels.empty()) {  // a classifier: its validation against the majority-class baseline
    std::printf("summary: %lld steps in %.1f s; loss %.4f -> %.4f; validation accuracy %.4f, macro-F1 %.4f, loss %.4f "
                "(majority-class baseline accuracy %.4f; %zu labels, %lld parameters)\n"
                "         metrics %s, plot %s, checkpoint %s\n",
                (long long)s.steps, s.seconds, s.first_loss, s.final_loss, s.val_accuracy, s.val_macro_f1,
                s.final_val_loss, s.majority_accuracy, s.labels.size(), (long long)s.num_parameters,
                s.metrics_path.c_str(), s.plot_path.c_str(), s.checkpoint_path.c_str());
    return kExitOk;
  }
  std::printf(
      "summary: %lld steps, %lld tokens in %.1f s (%.0f tokens/s); loss %.4f -> %.4f; best validation "
      "loss %.4f nats/token vs unigram baseline %.4f (vocabulary %lld, %lld parameters); peak memory %s "
      "(estimated %s)\n"
      "         metrics %s, plot %s, checkpoint %s\n",
      (long long)s.steps, (long long)s.tokens, s.seconds, s.tokens_per_s, s.first_loss, s.final_loss, s.best_val_loss,
      s.unigram_entropy, (long long)s.vocab_size, (long long)s.num_parameters,
      train::format_bytes(double(s.peak_memory_bytes)).c_str(), train::format_bytes(double(s.estimated_peak_bytes)).c_str(),
      s.metrics_path.c_str(), s.plot_path.c_str(),
      s.checkpoint_path.c_str());
  return kExitOk;
}

}  // namespace

Command add_train_command(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("train", "Train a GPT from a TOML config (see configs/ and --help)");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set optim.lr=3e-4 (repeatable)");
  app->add_flag("--resume", opt->resume,
                "continue from the newest complete checkpoint in train.out_dir (the one checkpoints/latest "
                "names, else found by scanning the folder)");
  app->add_flag("--overwrite", opt->overwrite,
                "start over in a train.out_dir that holds an earlier run: remove its checkpoints and metrics "
                "(without it such a run is refused)");
  app->add_option("--init-from", opt->init_from,
                  "start from the model weights of a checkpoint (a folder, or a run's out_dir: its latest) or "
                  "a Hugging Face folder (config.json, safetensors, tokenizer.json), at step 0 with a fresh "
                  "optimizer; [model] and the tokenizer must match it");
  app->add_flag("--print-config", opt->print_config, "print the resolved config as TOML and exit");
  app->add_flag("--force", opt->force,
                "start even when the memory estimate says the run cannot fit (the same as "
                "--set train.memory_check=false)");
  app->add_option("--nproc", opt->nproc,
                  "run N processes on this machine, one per rank of the [parallel] layout (N = dp x tp x pp; "
                  "with no layout given, dp = N); "
                  "a shortcut for trireme launch --nproc-per-node N -- trireme train ...")
      ->check(CLI::Range(1, 4096));
  app->add_option("--max-restarts", opt->max_restarts,
                  "with --nproc: when a rank fails, stop all and restart them up to K times, each restart "
                  "resuming from the latest checkpoint")
      ->check(CLI::Range(0, 1000));
  app->footer("Config keys:\n" + io::config_help());
  return {app, [opt] {
            io::Config cfg;
            if (opt->force) opt->overrides.push_back("train.memory_check=false");
            try {
              cfg = opt->config.empty() ? io::Config::parse("", "defaults", opt->overrides)
                                        : io::Config::load(opt->config, opt->overrides);
              if (cfg.get_bool("parallel.auto")) cfg = apply_auto_layout(*opt, cfg);
              if (opt->print_config) {
                std::printf("%s", cfg.to_toml().c_str());
                return kExitOk;
              }
              if (opt->resume && opt->overwrite) {
                std::fprintf(stderr, "trireme train: --resume continues the run in train.out_dir and --overwrite "
                                     "removes it; give one of them\n");
                return kExitUsage;
              }
              if (opt->resume && !opt->init_from.empty()) {
                std::fprintf(stderr, "trireme train: --resume continues the run in train.out_dir from its own "
                                     "checkpoint and --init-from starts a new one from another's weights; give one "
                                     "of them\n");
                return kExitUsage;
              }
              return run_training(*opt, cfg);
            } catch (const train::RunRefused& e) {  // one line: what is in the way and what to do
              std::fprintf(stderr, "trireme train: %s\n", e.what());
              return kExitUsage;
            } catch (const io::ConfigError& e) {  // also found at run time: the world size
              std::fprintf(stderr, "trireme train: config error:\n%s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
