// The trireme subcommands: each file adds one to the root CLI11 app and returns how to run it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "trireme/io/config.h"

namespace trireme::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // returns the process exit status
};

Command add_env_command(CLI::App& root);
Command add_plot_command(CLI::App& root);
Command add_train_command(CLI::App& root);
Command add_prepare_command(CLI::App& root);
Command add_generate_command(CLI::App& root);
Command add_eval_command(CLI::App& root);
Command add_launch_command(CLI::App& root);
Command add_estimate_command(CLI::App& root);
Command add_plan_command(CLI::App& root);
Command add_import_command(CLI::App& root);
Command add_export_command(CLI::App& root);
Command add_graph_command(CLI::App& root);

// --device for the commands that run a trained model: cpu, cuda or cuda:N, checked when parsed.
void add_device_option(CLI::App* app, std::string& device);
// --no-memory-check: load the model even when its memory estimate exceeds what the device has.
void add_memory_check_flag(CLI::App* app, bool& no_memory_check);

// --nproc N of train and estimate: the overrides that give the layout N processes (none when it
// has them; dp = N when no layout is given); io::ConfigError when it cannot.
std::vector<std::string> nproc_overrides(const io::ParallelConfig& par, int nproc);

// The vocabulary a run of tc would have: its prepared data's (data.dir, or train.out_dir/data from
// an earlier run), else, for a language model not prepared yet, that of data.tokenizer_file or of
// the character tokenizer trained on the corpus; nullopt when it is not known before preparing
// (a BPE tokenizer to train, fine-tuning data, a corpus that cannot be read).
std::optional<int64_t> run_vocab(const io::TrainConfig& tc);

// Exit statuses shared by the subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  // bad flags, bad config: nothing ran

}  // namespace trireme::cli
