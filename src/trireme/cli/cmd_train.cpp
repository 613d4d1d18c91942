// `trireme train --config FILE [--set key=value ...] [--resume]`: train a GPT from a TOML config.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/io/config.h"
#include "trireme/train/progress.h"
#include "trireme/train/trainer.h"

namespace trireme::cli {

Command add_train_command(CLI::App& root) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
    bool resume = false;
    bool print_config = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("train", "Train a GPT from a TOML config (see configs/ and --help)");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set optim.lr=3e-4 (repeatable)");
  app->add_flag("--resume", opt->resume, "continue from the latest checkpoint in train.out_dir");
  app->add_flag("--print-config", opt->print_config, "print the resolved config as TOML and exit");
  app->footer("Config keys:\n" + io::config_help());
  return {app, [opt] {
            io::Config cfg;
            try {
              cfg = opt->config.empty() ? io::Config::parse("", "defaults", opt->overrides)
                                        : io::Config::load(opt->config, opt->overrides);
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme train: config error:\n%s\n", e.what());
              return kExitUsage;
            }
            if (opt->print_config) {
              std::printf("%s", cfg.to_toml().c_str());
              return kExitOk;
            }
            train::Trainer trainer(cfg, {.resume = opt->resume, .interactive = train::Progress::stderr_is_terminal()});
            train::TrainSummary s = trainer.run();
            std::printf(
                "summary: %lld steps, %lld tokens in %.1f s (%.0f tokens/s); loss %.4f -> %.4f; best validation "
                "loss %.4f nats/token vs unigram baseline %.4f (vocabulary %lld, %lld parameters)\n"
                "         metrics %s, plot %s, checkpoint %s\n",
                (long long)s.steps, (long long)s.tokens, s.seconds, s.tokens_per_s, s.first_loss, s.final_loss,
                s.best_val_loss, s.unigram_entropy, (long long)s.vocab_size, (long long)s.num_parameters,
                s.metrics_path.c_str(), s.plot_path.c_str(), s.checkpoint_path.c_str());
            return kExitOk;
          }};
}

}  // namespace trireme::cli
