// The training configuration: a TOML file checked against one schema table, plus
// `--set key=value` overrides, resolved into typed structs.
//
// Note [config schema]
// Every key is one row of train_config_schema(): its path ("optim.lr"), type, default, range
// or choices, help text, and the struct field it fills. Parsing, validation, error messages,
// defaults, `--set`, to_toml() and the help listing all read that table, so adding a section
// (say [parallel]) is adding a struct and its rows. Checks that involve several keys
// (n_head divides d_model) live in one list beside the table.
//
// Errors are ConfigError (a trireme::Error, so the CLI can exit with status 2). Every problem
// is reported at once, one per line, each starting with the key path:
//   optim.lr: expected a float > 0, got -1 (train.toml line 12)
//   unknown key 'optim.lrr' (did you mean 'optim.lr'?) (train.toml line 13)
//
//   Config cfg = Config::load("train.toml", {"optim.lr=3e-4", "train.steps=2000"});
//   TrainConfig tc = cfg.resolve();              // tc.optim.lr == 3e-4
//   std::string saved = cfg.to_toml();           // Config::parse(saved) gives cfg back
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trireme/core/error.h"

namespace trireme::io {

class ConfigError : public Error {
 public:
  using Error::Error;
};

struct ModelConfig {
  std::string arch;  // "gpt2" | "llama" (models/gpt_block.h, Note [GPT architectures])
  int64_t d_model = 0, n_layer = 0, n_head = 0, block_size = 0;
  double dropout = 0;
  bool bias = false, tie_embeddings = false;
  int64_t vocab_size = 0;         // 0: the tokenizer's
  int64_t intermediate_size = 0;  // the MLP's hidden width; 0: 4 d_model
  double norm_eps = 0;
  int64_t n_kv_head = 0;          // llama; 0: n_head
  double rope_theta = 0;          // llama
  bool qkv_bias = false;          // llama
};

struct DataConfig {
  std::vector<std::string> corpus;  // "tang" = the default poems; else files or folders
  std::string tokenizer;            // "char" | "bpe"
  std::string tokenizer_file;       // a tokenizer.json to use as it is (Hugging Face or trireme); "" = train one
  int64_t bpe_vocab_size = 0;
  double val_fraction = 0;          // share of the documents held out (io/corpus.h split_corpus)
  int64_t split_seed = 0;           // picks the validation documents
  std::string dir;                  // a folder `trireme prepare` wrote; "" = prepare from corpus
};

struct OptimConfig {
  std::string name;  // "adamw" | "sgd"
  double lr = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, momentum = 0, grad_clip = 0;
};

struct ScheduleConfig {
  std::string kind;  // "constant" | "cosine"
  int64_t warmup_steps = 0;
  double min_lr = 0;
};

struct TrainLoopConfig {
  int64_t steps = 0, batch_size = 0, eval_interval = 0, eval_batches = 0, checkpoint_interval = 0,
          log_interval = 0, seed = 0, threads = 0;
  std::string out_dir, device;
  std::string precision;             // "f32" | "bf16" | "f16" (docs/MIXED_PRECISION.md)
  std::string mode;                  // "eager" | "static" (docs/STATIC_GRAPH.md)
  double loss_scale_init = 0;        // f16 only: GradScaler's initial scale
  int64_t loss_scale_interval = 0;   // f16 only: GradScaler's growth_interval
  bool memory_check = true;          // refuse a run whose memory estimate exceeds what the device has
};

// How a run is spread over processes (docs/PARALLELISM.md). dp x tp x pp must equal the job's
// WORLD_SIZE, which only the trainer can check (at run time).
struct ParallelConfig {
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t micro_batches = 1;   // per optimizer step and data-parallel rank (pipeline or accumulation)
  std::string schedule;        // "1f1b" | "gpipe" | "interleaved"
  int64_t virtual_stages = 1;  // model chunks per pipeline rank (interleaved only)
  int64_t zero = 0;            // ZeRO stage (docs/MEMORY.md): 1 shards AdamW's state over dp, 2 the
                               // gradients too, 3 the parameters too; 0 replicates everything
  double bucket_mb = 25;       // data-parallel gradient bucket size
  bool sequence_parallel = false;  // tp > 1: shard activations between tp regions by tokens
  int64_t replica_check_interval = 100;  // steps between dp replicas' parameter-hash checks (0 = off)
  std::string peer_allreduce = "auto";   // "auto" | "off" | "on": GPU groups' copy-engine collectives
  bool auto_layout = false;  // parallel.auto: the CLI replaces the layout keys with the planner's choice
  int64_t world_size() const { return dp * tp * pp; }
  std::string describe() const;  // "dp=2 tp=1 pp=2"
};

struct MemoryConfig {
  std::string recompute;         // "none" | "full"
  int64_t recompute_layers = -1;  // the first N blocks of each pipeline stage; -1 = all
};

// LoRA adapters on the blocks' linear layers (parallel/lora.h, docs/FINETUNING.md).
struct LoraConfig {
  int64_t rank = 0;                  // 0: no adapters, every weight trains
  double alpha = 16, dropout = 0;    // output scale alpha / rank; dropout on the adapters' input
  std::vector<std::string> targets;  // block modules ("attn.c_proj", "mlp.c_fc", ...) or "all"
};

// What a run trains on (docs/FINETUNING.md): the corpus as a language model, or a JSONL file of
// examples for supervised fine-tuning or sequence classification.
struct FinetuneConfig {
  std::string task;                  // "lm" | "sft" | "classify"
  std::string train_file, val_file;  // JSONL (sft, classify) or CSV (classify); val "" = held out
  double val_fraction = 0;           // with no val_file: the share of train_file's examples held out
  std::string template_text;         // sft: the text around {prompt} and {response}
  std::string chat_template;         // sft: "" (template_text), "tokenizer", "file:PATH" or Jinja text (io/sft_chat.h)
  std::string bad_lines;             // "fail" | "skip"
  bool pack = true;                  // sft: several examples per block_size sequence
  std::vector<std::string> labels;   // classify: the label set; [] = the training file's labels
};

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainLoopConfig train;
  ParallelConfig parallel;
  MemoryConfig memory;
  LoraConfig lora;
  FinetuneConfig finetune;
};

enum class ConfigType { integer, floating, boolean, string, string_list };
using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

// One row of the schema (Note [config schema]).
struct ConfigKey {
  std::string path;  // "section.key"
  ConfigType type;
  ConfigValue default_value;
  std::string help;
  // Range for integer and floating keys; exclusive bounds are strict.
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices;  // for string keys: the allowed values, when limited
  // An extra check for what ranges and choices cannot say, and the expectation it stands for
  // in error messages ("\"cpu\", \"cuda\" or \"cuda:N\"").
  std::function<bool(const ConfigValue&)> check;
  std::string check_expects;
  std::function<void(TrainConfig&, const ConfigValue&)> store;  // writes the value into the struct
  // An integer key that was a boolean once: true and false still read as 1 and 0.
  bool reads_booleans = false;

  std::string expectation() const;  // "a float > 0", "one of \"adamw\", \"sgd\""
};

const std::vector<ConfigKey>& train_config_schema();

class Config {
 public:
  Config();  // every key at its default

  // Parses TOML text, then applies overrides ("key=value", as given to --set), then validates.
  // `source` names the text in errors (the file name).
  static Config parse(std::string_view toml_text, const std::string& source = "config",
                      const std::vector<std::string>& overrides = {});
  static Config load(const std::string& path, const std::vector<std::string>& overrides = {});

  // Applies one "key=value" override and re-validates. The value is read as the key's type:
  // TOML syntax for numbers and booleans; strings may be bare (out_dir=runs/a) or quoted; a
  // string list is a TOML array (corpus=["a.txt","b/"]) or one bare string.
  void set(const std::string& assignment);

  const ConfigValue& get(const std::string& path) const;  // throws ConfigError on an unknown path
  int64_t get_int(const std::string& path) const { return std::get<int64_t>(get(path)); }
  double get_float(const std::string& path) const { return std::get<double>(get(path)); }
  bool get_bool(const std::string& path) const { return std::get<bool>(get(path)); }
  const std::string& get_string(const std::string& path) const { return std::get<std::string>(get(path)); }

  TrainConfig resolve() const;
  // The resolved config as TOML, every key in schema order with its help as a comment; it
  // parses back to an equal Config (for checkpoints and run folders).
  std::string to_toml() const;

  bool operator==(const Config& other) const { return values_ == other.values_; }

 private:
  std::map<std::string, ConfigValue> values_;
};

// A listing of every key with type, default and help, for `trireme train --help`.
std::string config_help();

}  // namespace trireme::io
