// The tiny GPT-on-the-poems config shared by the trainer tests (tests/train, tests/cuda).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trireme/io/config.h"

namespace trireme::testing {

// A fresh (removed) folder under the temp directory, unique per process.
inline std::string fresh_run_dir(const std::string& name) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

// `text` in a file under the temp directory, its name unique per process; returns its path.
inline std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p.string();
}

// 60 prompt/response pairs of a verse (JSONL, for finetune.task = "sft") whose responses have
// 1 to 5 characters, so micro-batches hold different numbers of counted targets.
inline void write_verse_sft_pairs(const std::string& path) {
  const std::string verse = "床前明月光疑是地上霜举头望明月低头思故乡";
  std::ofstream data(path);
  for (int i = 0; i < 60; ++i) {
    const size_t len = size_t(1 + i % 5), at = size_t(i % 15);
    data << "{\"prompt\": \"" << verse.substr(3 * at, 3) << "\", \"response\": \"" << verse.substr(3 * at + 3, 3 * len)
         << "\"}\n";
  }
}

// The [model] section of the committed Qwen2 fixture (tests/fixtures/hf/qwen2), for runs that
// start from it with --init-from.
inline const char* const kQwen2FixtureModel = R"(
[model]
arch = "llama"
d_model = 64
n_layer = 2
n_head = 4
block_size = 32
bias = false
tie_embeddings = true
intermediate_size = 96
vocab_size = 367
norm_eps = 1e-06
n_kv_head = 2
rope_theta = 1000000.0
qkv_bias = true
)";

// d_model 32, 2 layers, block 16, batch 8, char tokenizer on the Tang poems, evaluation at the end
// and a checkpoint every 10 steps; `extra` overrides (optim.lr, train.device, ...) come last.
inline io::Config tiny_trainer_config(const std::string& out_dir, int64_t steps, double dropout,
                                      const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"train.out_dir=" + out_dir, "train.steps=" + std::to_string(steps),
                                        "train.eval_interval=" + std::to_string(steps),
                                        "train.checkpoint_interval=10", "model.dropout=" + std::to_string(dropout)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return io::Config::parse(R"(
[model]
d_model = 32
n_layer = 2
n_head = 2
block_size = 16
bias = true
[data]
corpus = ["tang"]
tokenizer = "char"
[schedule]
kind = "cosine"
warmup_steps = 5
[train]
batch_size = 8
eval_batches = 4
log_interval = 100
threads = 1
)", "test", overrides);
}

}  // namespace trireme::testing
