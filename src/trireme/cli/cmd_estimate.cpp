// `trireme estimate --config FILE [--set key=value ...] [--nproc N] [--vocab V] [--device-memory GiB]
// [--json]`: what a training run of the config would hold in memory, per process and part
// (train/memory_estimate.h), beside what the device has, without building anything.
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "trireme/cli/commands.h"
#include "trireme/core/device.h"
#include "trireme/io/config.h"
#include "trireme/train/memory_check.h"

namespace trireme::cli {

namespace {

struct Options {
  std::string config;
  std::vector<std::string> overrides;
  int nproc = 0;
  int64_t vocab = 0;
  double device_memory_gib = 0;
  bool json = false;
};

// The vocabulary: --vocab, else the one the run would have (run_vocab: its prepared data, or the
// tokenizer it would load or train); nullopt when that is not known before preparing.
std::optional<int64_t> known_vocab(const Options& opt, const io::TrainConfig& tc) {
  if (opt.vocab > 0) return opt.vocab;
  return run_vocab(tc);
}

std::optional<Device> device_of(const io::TrainConfig& tc) {
  if (tc.train.device.rfind("cuda", 0) == 0) return Device::cuda(0);  // each rank gets one GPU alike
  if (tc.train.device == "cpu") return Device::cpu();
  return std::nullopt;  // "auto": the trainer decides when it starts
}

int run_estimate(const Options& opt, const io::TrainConfig& tc) {
  const std::optional<int64_t> vocab = known_vocab(opt, tc);
  const auto ranks = train::estimate_training_memory_per_rank(tc, vocab.value_or(0));
  const std::optional<Device> device = device_of(tc);
  std::optional<double> capacity;
  std::string capacity_from;
  if (opt.device_memory_gib > 0) {
    capacity = opt.device_memory_gib * double(1ull << 30), capacity_from = "--device-memory";
  } else if (device) {
    capacity = train::available_memory(*device);
    capacity_from = device->is_cpu() ? "available on this machine" : str_cat("free on ", device->str());
  }
  // CPU processes share one machine's memory; each GPU is its own.
  const bool shared = device && device->is_cpu() && opt.device_memory_gib <= 0;
  double worst = 0, sum = 0;
  for (const auto& e : ranks) worst = std::max(worst, e.total()), sum += e.total();
  const double needed = shared ? sum : worst;
  const bool fits = !capacity || needed <= *capacity;

  if (opt.json) {
    nlohmann::json j;
    j["vocab_size"] = vocab ? nlohmann::json(*vocab) : nlohmann::json(nullptr);
    j["capacity_bytes"] = capacity ? nlohmann::json(*capacity) : nlohmann::json(nullptr);
    j["capacity_shared_by_ranks"] = shared;
    j["fits"] = fits;
    for (const auto& e : ranks) {
      j["ranks"].push_back({{"rank", e.rank}, {"dp", e.dp_rank}, {"tp", e.tp_rank}, {"pp", e.pp_rank},
                            {"parameters", e.parameters}, {"peak_bytes", e.total()},
                            {"parts", {{"weights", e.weight_bytes}, {"gradients", e.gradient_bytes},
                                       {"optimizer", e.optimizer_bytes}, {"activations", e.activation_bytes},
                                       {"communication", e.communication_bytes}}}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  const auto& m = tc.model;
  std::printf("model: GPT d_model=%lld n_layer=%lld n_head=%lld block_size=%lld, vocabulary %s\n", (long long)m.d_model,
              (long long)m.n_layer, (long long)m.n_head, (long long)m.block_size,
              vocab ? std::to_string(*vocab).c_str()
                    : str_cat("not known (", tc.data.tokenizer == "bpe" ? "data.bpe_vocab_size" : "256",
                              " assumed; --vocab V or a prepared data.dir gives it)")
                          .c_str());
  std::printf("run: %s, batch %lld, micro_batches %lld, precision %s, recompute %s, optimizer %s\n\n",
              tc.parallel.describe().c_str(), (long long)tc.train.batch_size, (long long)tc.parallel.micro_batches,
              tc.train.precision.c_str(), tc.memory.recompute.c_str(), tc.optim.name.c_str());
  std::printf("%-6s %-10s %12s %12s %12s %12s %14s %12s\n", "rank", "dp/tp/pp", "weights", "gradients", "optimizer",
              "activations", "communication", "peak");
  // Ranks of one pipeline stage hold the same: one row per stage past 16 ranks.
  const bool every_rank = ranks.size() <= 16;
  for (const auto& e : ranks) {
    if (!every_rank && (e.dp_rank != 0 || e.tp_rank != 0)) continue;
    std::printf("%-6s %-10s %12s %12s %12s %12s %14s %12s\n",
                every_rank ? std::to_string(e.rank).c_str() : str_cat("pp ", e.pp_rank).c_str(),
                str_cat(e.dp_rank, "/", e.tp_rank, "/", e.pp_rank).c_str(), train::format_bytes(e.weight_bytes).c_str(),
                train::format_bytes(e.gradient_bytes).c_str(), train::format_bytes(e.optimizer_bytes).c_str(),
                train::format_bytes(e.activation_bytes).c_str(), train::format_bytes(e.communication_bytes).c_str(),
                train::format_bytes(e.total()).c_str());
  }
  const train::MemoryEstimate& first = ranks.front();
  std::printf("\npeak = weights + optimizer + communication + gradients and activations: %s\n",
              first.activations_beside_gradients >= first.activation_bytes ? "summed (the gradients live through the forward)"
              : first.activations_beside_gradients > 0 ? "the gradients in flight beside the activations left after the head's backward (ZeRO-2/3)"
                                                       : "the larger of the two (they take turns)");
  if (!capacity) {
    std::printf("capacity: not known (train.device = %s; --device-memory GiB gives it)\n", tc.train.device.c_str());
  } else {
    std::printf("needs %s %s; %s %s: %s\n", train::format_bytes(needed).c_str(),
                shared ? str_cat("for its ", ranks.size(), " process", ranks.size() > 1 ? "es" : "").c_str()
                       : "per device at most",
                train::format_bytes(*capacity).c_str(), capacity_from.c_str(), fits ? "fits" : "does not fit");
  }
  return kExitOk;
}

}  // namespace

Command add_estimate_command(CLI::App& root) {
  auto opt = std::make_shared<Options>();
  CLI::App* app =
      root.add_subcommand("estimate", "The memory a training run of a config needs, per process, before running it");
  app->add_option("-c,--config", opt->config, "TOML config file (default: every key at its default)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", opt->overrides, "override a config key, e.g. --set parallel.tp=2 (repeatable)");
  app->add_option("--nproc", opt->nproc, "the process count train --nproc would use (alone: dp = N)")
      ->check(CLI::Range(1, 4096));
  app->add_option("--vocab", opt->vocab, "the vocabulary size (default: from the prepared data, if any)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app->add_option("--device-memory", opt->device_memory_gib,
                  "GiB each process's device has (default: what train.device has free now)")
      ->check(CLI::Range(1e-3, 1e9));
  app->add_flag("--json", opt->json,
                "print {\"ranks\": [{\"rank\", \"peak_bytes\", \"parts\": {...}}, ...], \"capacity_bytes\", ...}");
  return {app, [opt] {
            try {
              auto load = [&](const std::vector<std::string>& overrides) {
                return opt->config.empty() ? io::Config::parse("", "defaults", overrides)
                                           : io::Config::load(opt->config, overrides);
              };
              io::TrainConfig tc = load(opt->overrides).resolve();
              if (opt->nproc > 0) {  // as train's --nproc
                std::vector<std::string> overrides = opt->overrides;
                for (auto& o : nproc_overrides(tc.parallel, opt->nproc)) overrides.push_back(std::move(o));
                tc = load(overrides).resolve();
              }
              return run_estimate(*opt, tc);
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme estimate: config error:\n%s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
