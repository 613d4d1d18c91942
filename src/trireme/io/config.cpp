// The training config: schema table, TOML parsing and validation, overrides, to_toml.
#include "trireme/io/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "trireme/core/device.h"
#include "trireme/io/chat_template.h"
#include "trireme/io/toml_repaired.h"
#include "trireme/io/utf8.h"

namespace trireme::io {

namespace {

// ---- formatting -----------------------------------------------------------------------------

// Shortest text that reads back to the same double.
std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Plain decimals read better ("0.0003", not "3e-04") unless the exponent form is much shorter.
  char fixed[400], sci[64];
  auto f = std::to_chars(fixed, fixed + sizeof fixed, v, std::chars_format::fixed);
  auto e = std::to_chars(sci, sci + sizeof sci, v, std::chars_format::scientific);
  size_t nf = size_t(f.ptr - fixed), ne = size_t(e.ptr - sci);
  return nf <= ne + 2 ? std::string(fixed, nf) : std::string(sci, ne);
}

// A TOML float literal: like format_number, but always with a '.' or an exponent.
std::string toml_float(double v) {
  std::string s = format_number(v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string toml_quote(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string format_value(const ConfigValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(x);
        } else if constexpr (std::is_same_v<T, double>) {
          return toml_float(x);
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return toml_quote(x);
        } else {
          std::string out = "[";
          for (size_t i = 0; i < x.size(); ++i) out += (i ? ", " : "") + toml_quote(x[i]);
          return out + "]";
        }
      },
      v);
}

// How a TOML value reads in an error message ("got -1", "got \"abc\"", "got a table").
std::string describe(const toml::node& n) {
  if (auto v = n.as_integer()) return std::to_string(v->get());
  if (auto v = n.as_floating_point()) return toml_float(v->get());
  if (auto v = n.as_boolean()) return v->get() ? "true" : "false";
  if (auto v = n.as_string()) return toml_quote(v->get());
  if (auto a = n.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < a->size(); ++i) out += (i ? ", " : "") + describe((*a)[i]);
    return out + "]";
  }
  if (n.is_table()) return "a table";
  return "a date/time";
}

std::string where(const toml::node& n, const std::string& source) {
  return str_cat(" (", source, " line ", n.source().begin.line, ")");
}

// ---- the schema -------------------------------------------------------------------------------

using Store = std::function<void(TrainConfig&, const ConfigValue&)>;

template <class S, class F>
Store field(S TrainConfig::*section, F S::*member) {
  return [section, member](TrainConfig& c, const ConfigValue& v) { (c.*section).*member = std::get<F>(v); };
}

struct Range {
  std::optional<double> min, max;
  bool min_exclusive = false, max_exclusive = false;
};
Range at_least(double a) { return {a, std::nullopt, false, false}; }
Range above(double a) { return {a, std::nullopt, true, false}; }
Range closed(double a, double b) { return {a, b, false, false}; }
Range half_open(double a, double b) { return {a, b, false, true}; }

ConfigKey integer_key(std::string path, int64_t def, Range r, std::string help, Store store) {
  return {std::move(path), ConfigType::integer, def, std::move(help), r.min, r.max, r.min_exclusive,
          r.max_exclusive, {}, {}, {}, std::move(store)};
}
ConfigKey float_key(std::string path, double def, Range r, std::string help, Store store) {
  return {std::move(path), ConfigType::floating, def, std::move(help), r.min, r.max, r.min_exclusive,
          r.max_exclusive, {}, {}, {}, std::move(store)};
}
ConfigKey bool_key(std::string path, bool def, std::string help, Store store) {
  return {std::move(path), ConfigType::boolean, def, std::move(help), {}, {}, false, false, {}, {}, {}, std::move(store)};
}
ConfigKey choice_key(std::string path, std::string def, std::vector<std::string> choices, std::string help,
                     Store store) {
  return {std::move(path), ConfigType::string, std::move(def), std::move(help), {}, {}, false, false,
          std::move(choices), {}, {}, std::move(store)};
}
// parallel.zero was a boolean (ZeRO-1 or nothing) before it took the stage: true still means 1.
ConfigKey zero_stage_key() {
  ConfigKey k = integer_key("parallel.zero", 0, closed(0, 3),
                            "ZeRO stage over the dp ranks: 0 none, 1 AdamW's state sharded, 2 the gradients too, "
                            "3 the parameters too (true = 1)",
                            field(&TrainConfig::parallel, &ParallelConfig::zero));
  k.reads_booleans = true;
  return k;
}

struct Check {
  std::function<bool(const ConfigValue&)> ok;
  std::string expects;
};

ConfigKey string_key(std::string path, ConfigType type, ConfigValue def, std::string help, Store store, Check check) {
  return {std::move(path), type, std::move(def), std::move(help), {}, {}, false, false, {}, std::move(check.ok),
          std::move(check.expects), std::move(store)};
}

const Check device_check{[](const ConfigValue& v) {
                           try {
                             Device::parse(std::get<std::string>(v));
                             return true;
                           } catch (const Error&) {
                             return false;
                           }
                         },
                         "\"cpu\", \"cuda\" or \"cuda:N\""};

const Check nonempty_check{[](const ConfigValue& v) { return !std::get<std::string>(v).empty(); },
                           "a non-empty string"};

Check nonempty_names_check() {
  return {[](const ConfigValue& v) {
            const auto& list = std::get<std::vector<std::string>>(v);
            return !list.empty() && std::none_of(list.begin(), list.end(), [](const std::string& s) { return s.empty(); });
          },
          "a non-empty array of layer names"};
}
Check template_check() {
  return {[](const ConfigValue& v) {
            const auto& t = std::get<std::string>(v);
            const size_t p = t.find("{prompt}"), r = t.find("{response}");
            return p != std::string::npos && r != std::string::npos && p < r && t.find("{prompt}", p + 1) == std::string::npos &&
                   t.find("{response}", r + 1) == std::string::npos && r + 10 == t.size();
          },
          "a text with one {prompt} followed by one {response} that ends it"};
}

// finetune.chat_template: a source ("tokenizer", file:PATH) or a Jinja text, which must parse.
Check chat_template_check() {
  return {[](const ConfigValue& v) {
            const auto& t = std::get<std::string>(v);
            return t.empty() || t == "tokenizer" || (t.starts_with("file:") && t.size() > 5) ||
                   t.find("{{") != std::string::npos || t.find("{%") != std::string::npos;
          },
          "\"tokenizer\", \"file:PATH\" or a Jinja chat template (with {{ }} or {% %})"};
}

const Check corpus_check{[](const ConfigValue& v) {
                           const auto& list = std::get<std::vector<std::string>>(v);
                           return !list.empty() && std::none_of(list.begin(), list.end(),
                                                                [](const std::string& s) { return s.empty(); });
                         },
                         "\"tang\" or a path, or a non-empty array of them"};

// data.dir trains on what `trireme prepare` wrote, so the keys that say how to prepare data would
// be ignored: set to anything but their defaults, they are refused rather than dropped silently.
std::string data_dir_conflicts(const Config& c) {
  if (c.get_string("data.dir").empty()) return "";
  std::string set;
  for (const auto& k : train_config_schema()) {
    if (!k.path.starts_with("data.") || k.path == "data.dir" || c.get(k.path) == k.default_value) continue;
    set += (set.empty() ? "" : ", ") + k.path + " = " + format_value(c.get(k.path));
  }
  if (set.empty()) return "";
  return str_cat("data.dir: is mutually exclusive with data.corpus and the other keys that say how to prepare data ",
                 "(the folder's shards and tokenizer are used as they are), got ", set,
                 "; remove those keys, or remove data.dir to prepare data.corpus in this run");
}

// Upper bounds for sizes: far above any model or run that fits in memory (the memory check
// refuses those with an estimate), and small enough that the products the trainer forms from
// them (d_model x d_model x 12 x n_layer parameters, step x batch_size samples, block_size + 2)
// stay inside int64.
constexpr double kMaxWidth = 1 << 20;    // model.d_model, model.block_size, train.eval_batches
constexpr double kMaxLayers = 1 << 16;   // model.n_layer, model.n_head, parallel ranks and stages
constexpr double kMaxBatch = 1 << 24;    // train.batch_size, parallel.micro_batches
constexpr double kMaxSteps = 1e12;       // step counts and intervals

std::vector<ConfigKey> build_schema() {
  using T = TrainConfig;
  return {
      choice_key("model.arch", "gpt2", {"gpt2", "llama"},
                 "gpt2: LayerNorm, learned positions, GELU MLP; llama (Llama, Qwen2): RMSNorm, rotary positions, "
                 "SwiGLU MLP, grouped-query attention",
                 field(&T::model, &ModelConfig::arch)),
      integer_key("model.d_model", 256, closed(1, kMaxWidth), "width of the residual stream", field(&T::model, &ModelConfig::d_model)),
      integer_key("model.n_layer", 4, closed(1, kMaxLayers), "number of transformer blocks", field(&T::model, &ModelConfig::n_layer)),
      integer_key("model.n_head", 4, closed(1, kMaxLayers), "attention heads per block (must divide d_model)",
                  field(&T::model, &ModelConfig::n_head)),
      integer_key("model.block_size", 128, closed(1, kMaxWidth), "context length T in tokens", field(&T::model, &ModelConfig::block_size)),
      float_key("model.dropout", 0.0, half_open(0, 1), "dropout probability", field(&T::model, &ModelConfig::dropout)),
      bool_key("model.bias", false, "biases in linear layers and norms", field(&T::model, &ModelConfig::bias)),
      bool_key("model.tie_embeddings", true, "share the token embedding with the output projection",
               field(&T::model, &ModelConfig::tie_embeddings)),
      integer_key("model.vocab_size", 0, closed(0, 1 << 24),
                  "rows of the token embedding and the head; 0: the tokenizer's size (an imported model may have more)",
                  field(&T::model, &ModelConfig::vocab_size)),
      integer_key("model.intermediate_size", 0, closed(0, kMaxWidth), "hidden width of the MLP (0: 4 x d_model)",
                  field(&T::model, &ModelConfig::intermediate_size)),
      float_key("model.norm_eps", 1e-5, above(0), "epsilon of the LayerNorms (gpt2) or RMSNorms (llama)",
                field(&T::model, &ModelConfig::norm_eps)),
      integer_key("model.n_kv_head", 0, closed(0, kMaxLayers),
                  "llama: key/value heads, a divisor of n_head (grouped-query attention; 0: n_head)",
                  field(&T::model, &ModelConfig::n_kv_head)),
      float_key("model.rope_theta", 10000.0, above(0), "llama: base of the rotary position embedding",
                field(&T::model, &ModelConfig::rope_theta)),
      bool_key("model.qkv_bias", false, "llama: biases on the q, k and v projections (Qwen2 has them)",
               field(&T::model, &ModelConfig::qkv_bias)),

      string_key("data.corpus", ConfigType::string_list, std::vector<std::string>{"tang"},
                 "\"tang\" (the fortunes-zh Tang and Song poems) or UTF-8 text files and folders",
                 field(&T::data, &DataConfig::corpus), corpus_check),
      choice_key("data.tokenizer", "char", {"char", "bpe"}, "character-level or byte-level BPE",
                 field(&T::data, &DataConfig::tokenizer)),
      string_key("data.tokenizer_file", ConfigType::string, std::string(),
                 "a tokenizer.json to tokenize with as it is (a Hugging Face byte-level BPE one, or one trireme "
                 "wrote) instead of training data.tokenizer; \"\" = train one",
                 field(&T::data, &DataConfig::tokenizer_file), Check{}),
      integer_key("data.bpe_vocab_size", 2000, closed(256, 1 << 20), "target BPE vocabulary size (256 byte tokens + merges)",
                  field(&T::data, &DataConfig::bpe_vocab_size)),
      float_key("data.val_fraction", 0.1, closed(0, 0.5),
                "share of the documents held out for validation: whole documents spread over the corpus, picked "
                "with data.split_seed (at least one; a one-document corpus is split inside, near its end)",
                field(&T::data, &DataConfig::val_fraction)),
      integer_key("data.split_seed", 1337, at_least(0), "seed that picks the validation documents",
                  field(&T::data, &DataConfig::split_seed)),
      string_key("data.dir", ConfigType::string, std::string(),
                 "a folder written by `trireme prepare` (train.bin, val.bin, tokenizer.json) to train on as it is, "
                 "instead of data.corpus and the other data keys; \"\" = prepare data.corpus into train.out_dir/data",
                 field(&T::data, &DataConfig::dir), Check{}),

      choice_key("optim.name", "adamw", {"adamw", "sgd"}, "optimizer", field(&T::optim, &OptimConfig::name)),
      float_key("optim.lr", 1e-3, above(0), "peak learning rate", field(&T::optim, &OptimConfig::lr)),
      float_key("optim.weight_decay", 0.1, at_least(0), "decoupled weight decay (adamw) or L2 (sgd)",
                field(&T::optim, &OptimConfig::weight_decay)),
      float_key("optim.beta1", 0.9, half_open(0, 1), "adamw first-moment decay", field(&T::optim, &OptimConfig::beta1)),
      float_key("optim.beta2", 0.95, half_open(0, 1), "adamw second-moment decay", field(&T::optim, &OptimConfig::beta2)),
      float_key("optim.eps", 1e-8, above(0), "adamw denominator epsilon", field(&T::optim, &OptimConfig::eps)),
      float_key("optim.momentum", 0.9, half_open(0, 1), "sgd momentum", field(&T::optim, &OptimConfig::momentum)),
      float_key("optim.grad_clip", 1.0, at_least(0), "clip the global gradient norm to this (0 = off)",
                field(&T::optim, &OptimConfig::grad_clip)),

      choice_key("schedule.kind", "cosine", {"constant", "cosine"}, "learning-rate schedule after warm-up",
                 field(&T::schedule, &ScheduleConfig::kind)),
      integer_key("schedule.warmup_steps", 100, closed(0, kMaxSteps), "linear warm-up steps (at most train.steps)",
                  field(&T::schedule, &ScheduleConfig::warmup_steps)),
      float_key("schedule.min_lr", 1e-4, at_least(0), "final learning rate of the cosine schedule (at most optim.lr)",
                field(&T::schedule, &ScheduleConfig::min_lr)),

      integer_key("train.steps", 1000, closed(1, kMaxSteps), "optimizer steps", field(&T::train, &TrainLoopConfig::steps)),
      integer_key("train.batch_size", 8, closed(1, kMaxBatch), "global batch size in sequences", field(&T::train, &TrainLoopConfig::batch_size)),
      integer_key("train.eval_interval", 100, closed(0, kMaxSteps), "steps between validation runs (0 = never)",
                  field(&T::train, &TrainLoopConfig::eval_interval)),
      integer_key("train.eval_batches", 10, closed(1, kMaxWidth), "batches per validation run", field(&T::train, &TrainLoopConfig::eval_batches)),
      integer_key("train.checkpoint_interval", 500, closed(0, kMaxSteps), "steps between checkpoints (0 = only at the end)",
                  field(&T::train, &TrainLoopConfig::checkpoint_interval)),
      integer_key("train.log_interval", 10, closed(1, kMaxSteps), "steps between log lines", field(&T::train, &TrainLoopConfig::log_interval)),
      integer_key("train.seed", 1337, at_least(0), "seed for initialisation, data order and dropout",
                  field(&T::train, &TrainLoopConfig::seed)),
      integer_key("train.threads", 0, closed(0, 4096), "CPU threads (0 = all cores)", field(&T::train, &TrainLoopConfig::threads)),
      string_key("train.out_dir", ConfigType::string, std::string("out/run"), "folder for checkpoints, logs and prepared data",
                 field(&T::train, &TrainLoopConfig::out_dir), nonempty_check),
      string_key("train.device", ConfigType::string, std::string("cpu"), "\"cpu\", \"cuda\" or \"cuda:N\"",
                 field(&T::train, &TrainLoopConfig::device), device_check),
      choice_key("train.precision", "f32", {"f32", "bf16", "f16"},
                 "f32, or f32 master weights with bf16/f16 autocast (f16 adds dynamic loss scaling)",
                 field(&T::train, &TrainLoopConfig::precision)),
      choice_key("train.mode", "eager", {"eager", "static"},
                 "eager, or static: trace one training step into a graph and replay it (docs/STATIC_GRAPH.md)",
                 field(&T::train, &TrainLoopConfig::mode)),
      float_key("train.loss_scale_init", 65536.0, above(0), "f16: the initial loss scale",
                field(&T::train, &TrainLoopConfig::loss_scale_init)),
      integer_key("train.loss_scale_interval", 2000, closed(1, kMaxSteps), "f16: clean steps before the loss scale doubles",
                  field(&T::train, &TrainLoopConfig::loss_scale_interval)),
      bool_key("train.memory_check", true,
               "refuse a run whose memory estimate exceeds what the device has free (false: start it anyway)",
               field(&T::train, &TrainLoopConfig::memory_check)),

      integer_key("parallel.dp", 1, closed(1, kMaxLayers), "data-parallel replicas (each reads batch_size / dp sequences)",
                  field(&T::parallel, &ParallelConfig::dp)),
      integer_key("parallel.tp", 1, closed(1, kMaxLayers), "tensor-parallel ranks per replica (must divide model.n_head)",
                  field(&T::parallel, &ParallelConfig::tp)),
      integer_key("parallel.pp", 1, closed(1, kMaxLayers), "pipeline stages (at most model.n_layer)",
                  field(&T::parallel, &ParallelConfig::pp)),
      integer_key("parallel.micro_batches", 1, closed(1, kMaxBatch),
                  "micro-batches per step and dp rank: the pipeline's, or gradient accumulation when pp = 1",
                  field(&T::parallel, &ParallelConfig::micro_batches)),
      choice_key("parallel.schedule", "1f1b", {"1f1b", "gpipe", "interleaved"}, "pipeline schedule (pp > 1)",
                 field(&T::parallel, &ParallelConfig::schedule)),
      integer_key("parallel.virtual_stages", 1, closed(1, kMaxLayers), "model chunks per pipeline rank (schedule interleaved)",
                  field(&T::parallel, &ParallelConfig::virtual_stages)),
      zero_stage_key(),
      float_key("parallel.bucket_mb", 25.0, Range{0, 1 << 20, true, false}, "data-parallel gradient bucket size in MiB",
                field(&T::parallel, &ParallelConfig::bucket_mb)),
      bool_key("parallel.sequence_parallel", false,
               "tp > 1, pp = 1: shard the layer norms, residual adds and dropouts by tokens over tp "
               "(less memory and replicated work; the same training)",
               field(&T::parallel, &ParallelConfig::sequence_parallel)),
      integer_key("parallel.replica_check_interval", 100, closed(0, kMaxSteps),
                  "steps between checks that the data-parallel replicas' parameters are bit-identical (0 = off)",
                  field(&T::parallel, &ParallelConfig::replica_check_interval)),
      choice_key("parallel.peer_allreduce", "auto", {"auto", "off", "on"},
                 "GPU groups of one host: all-reduce, reduce-scatter and all-gather through the copy engines "
                 "instead of NCCL's kernels (auto: groups of 2 GPUs; on: 2 to 8; off: NCCL only)",
                 field(&T::parallel, &ParallelConfig::peer_allreduce)),
      bool_key("parallel.auto", false,
               "choose dp, tp, pp, micro_batches, schedule, virtual_stages, sequence_parallel, zero and "
               "memory.recompute with the planner for the processes the run has (--nproc N or the launcher's); "
               "logs the plan and its predicted step time (trireme plan --explain shows why)",
               field(&T::parallel, &ParallelConfig::auto_layout)),
      choice_key("memory.recompute", "none", {"none", "selective", "full"},
                 "activation recomputation: \"full\" keeps only each block's input and runs its forward again in "
                 "the backward (less memory, one more forward); \"selective\" recomputes only the layer norms' and "
                 "GELU's outputs (cheap, a third of the activations); the same losses either way",
                 field(&T::memory, &MemoryConfig::recompute)),
      integer_key("memory.recompute_layers", -1, closed(-1, kMaxLayers),
                  "with recompute: only the first N blocks of each pipeline stage (-1 = all)",
                  field(&T::memory, &MemoryConfig::recompute_layers)),
      integer_key("lora.rank", 0, closed(0, 4096),
                  "LoRA: the adapters' rank r; only the adapters train, the base weights stay frozen (0 = no "
                  "adapters, every weight trains)",
                  field(&T::lora, &LoraConfig::rank)),
      float_key("lora.alpha", 16.0, above(0), "LoRA: the adapters' output is scaled by alpha / rank",
                field(&T::lora, &LoraConfig::alpha)),
      float_key("lora.dropout", 0.0, half_open(0, 1), "LoRA: dropout on the adapters' input",
                field(&T::lora, &LoraConfig::dropout)),
      string_key("lora.targets", ConfigType::string_list, std::vector<std::string>{"all"},
                 "LoRA: the block layers that get adapters: attn.c_attn (gpt2), attn.q_proj and attn.kv_proj "
                 "(llama), attn.c_proj, mlp.c_fc, mlp.c_proj, or \"all\"",
                 field(&T::lora, &LoraConfig::targets), nonempty_names_check()),
      choice_key("finetune.task", "lm", {"lm", "sft", "classify"},
                 "what the run trains: lm, the next-token loss on [data]; sft, supervised fine-tuning on the "
                 "prompt/response pairs of finetune.train_file; classify, a classifier over finetune.labels",
                 field(&T::finetune, &FinetuneConfig::task)),
      string_key("finetune.train_file", ConfigType::string, std::string(),
                 "sft and classify: the training examples (JSONL; classify also CSV text,label)",
                 field(&T::finetune, &FinetuneConfig::train_file), Check{}),
      string_key("finetune.val_file", ConfigType::string, std::string(),
                 "sft and classify: the validation examples (\"\" = finetune.val_fraction of train_file, held out)",
                 field(&T::finetune, &FinetuneConfig::val_file), Check{}),
      float_key("finetune.val_fraction", 0.1, half_open(0, 1),
                "with no val_file: the share of train_file's examples held out (seeded by data.split_seed)",
                field(&T::finetune, &FinetuneConfig::val_fraction)),
      string_key("finetune.template", ConfigType::string, std::string("{prompt}\n{response}"),
                 "sft: the text of one example, with {prompt} and {response} placeholders; the loss counts "
                 "the response's tokens and the end-of-text token after it",
                 field(&T::finetune, &FinetuneConfig::template_text), template_check()),
      string_key("finetune.chat_template", ConfigType::string, std::string(),
                 "sft: render examples with a Hugging Face chat template (Jinja) instead of finetune.template: "
                 "\"tokenizer\" (the chat_template of the tokenizer_config.json beside the model's tokenizer), "
                 "\"file:PATH\", or the template's text; the loss counts the assistant's last message as rendered "
                 "(\"\" = finetune.template)",
                 field(&T::finetune, &FinetuneConfig::chat_template), chat_template_check()),
      choice_key("finetune.bad_lines", "fail", {"fail", "skip"},
                 "a malformed line of a finetune file: fail naming it, or skip it (the count is logged)",
                 field(&T::finetune, &FinetuneConfig::bad_lines)),
      bool_key("finetune.pack", true,
               "sft: pack several examples into each block_size sequence (false: one per sequence, padded)",
               field(&T::finetune, &FinetuneConfig::pack)),
      string_key("finetune.labels", ConfigType::string_list, std::vector<std::string>{},
                 "classify: the label set, in order ([] = the distinct labels of train_file, sorted)",
                 field(&T::finetune, &FinetuneConfig::labels), Check{}),
  };
}

// The default of a schema key.
const ConfigValue& default_of(const std::string& path) {
  for (const auto& k : train_config_schema())
    if (k.path == path) return k.default_value;
  TRIREME_FAIL("config: no key '", path, "' in the schema");
}

// "1, 2, 4 or 8": the divisors of n, for error messages.
std::string divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) out += (i == 0 ? "" : i + 1 == d.size() ? " or " : ", ") + std::to_string(d[i]);
  return out;
}

std::string suggest(const std::string& path, const std::vector<std::string>& candidates);

// [lora] against the model: target names the architecture has. The adapters run in every
// layout (docs/FINETUNING.md).
std::string lora_checks(const Config& c) {
  if (c.get_int("lora.rank") == 0) return "";
  const bool llama = c.get_string("model.arch") == "llama";
  const std::vector<std::string> names =
      llama ? std::vector<std::string>{"attn.q_proj", "attn.kv_proj", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}
            : std::vector<std::string>{"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
  std::vector<std::string> known = names;
  known.push_back("all");
  for (const std::string& t : std::get<std::vector<std::string>>(c.get("lora.targets"))) {
    if (std::find(known.begin(), known.end(), t) != known.end()) continue;
    // Hugging Face's layer names first: here q|k|v (gpt2) or k|v (llama) and gate|up are fused.
    const std::string hf = t.rfind('.') == std::string::npos ? t : t.substr(t.rfind('.') + 1);
    std::string hint = hf == "q_proj"                    ? (llama ? "attn.q_proj" : "attn.c_attn")
                       : hf == "k_proj" || hf == "v_proj" ? (llama ? "attn.kv_proj" : "attn.c_attn")
                       : hf == "o_proj"                    ? "attn.c_proj"
                       : hf == "gate_proj" || hf == "up_proj" ? "mlp.c_fc"
                       : hf == "down_proj"                 ? "mlp.c_proj"
                                                           : suggest(t, known);
    std::string list;
    for (size_t i = 0; i < known.size(); ++i) list += (i ? ", " : "") + toml_quote(known[i]);
    return str_cat("lora.targets: unknown layer \"", t, "\" for model.arch = \"", c.get_string("model.arch"), "\"",
                   hint.empty() ? "" : " (did you mean \"" + hint + "\"?)", "; expected some of ", list);
  }
  return "";
}

// [finetune] needs its files, and the corpus keys are not read by sft and classify.
std::string finetune_checks(const Config& c) {
  const std::string& task = c.get_string("finetune.task");
  if (task == "lm") {
    if (!c.get_string("finetune.train_file").empty())
      return "finetune.train_file: is read by finetune.task = \"sft\" or \"classify\", but finetune.task = \"lm\"; "
             "set finetune.task";
    return "";
  }
  if (c.get_string("finetune.train_file").empty())
    return str_cat("finetune.train_file: finetune.task = \"", task, "\" needs a file of examples; set finetune.train_file");
  return "";
}

// finetune.chat_template: read by sft only, instead of finetune.template; a template given as
// text is parsed now, so a mistake is reported before any data is read.
std::string chat_template_checks(const Config& c) {
  const std::string& chat = c.get_string("finetune.chat_template");
  if (chat.empty()) return "";
  if (c.get_string("finetune.task") != "sft")
    return "finetune.chat_template: is read by finetune.task = \"sft\" only; remove it or set finetune.task = \"sft\"";
  if (c.get("finetune.template") != default_of("finetune.template"))
    return "finetune.template: a text template and finetune.chat_template both say how to render an example; "
           "remove one of them";
  if (chat != "tokenizer" && !chat.starts_with("file:")) {
    try {
      ChatTemplate(chat, "finetune.chat_template");
    } catch (const ConfigError& e) {
      return e.what();
    }
  }
  return "";
}

// Checks that involve several keys; each returns "" or an error starting with the key path.
using CrossCheck = std::function<std::string(const Config&)>;
const std::vector<CrossCheck>& cross_checks() {
  static const std::vector<CrossCheck> checks = {
      data_dir_conflicts,
      [](const Config& c) -> std::string {
        int64_t d = c.get_int("model.d_model"), h = c.get_int("model.n_head");
        return d % h == 0 ? "" : str_cat("model.n_head: expected a divisor of model.d_model = ", d, ", got ", h);
      },
      [](const Config& c) -> std::string {
        int64_t w = c.get_int("schedule.warmup_steps"), s = c.get_int("train.steps");
        return w <= s ? "" : str_cat("schedule.warmup_steps: expected at most train.steps = ", s, ", got ", w);
      },
      // Tokens over the whole run (and so every sample index) must be countable in int64.
      [](const Config& c) -> std::string {
        int64_t s = c.get_int("train.steps"), b = c.get_int("train.batch_size"), t = c.get_int("model.block_size");
        int64_t tokens;
        if (!__builtin_mul_overflow(s, b, &tokens) && !__builtin_mul_overflow(tokens, t, &tokens)) return "";
        return str_cat("train.steps: train.steps x train.batch_size x model.block_size = ", s, " x ", b, " x ", t,
                       " tokens is more than a 64-bit counter holds; lower train.steps or train.batch_size");
      },
      [](const Config& c) -> std::string {
        double m = c.get_float("schedule.min_lr"), lr = c.get_float("optim.lr");
        return m <= lr ? ""
                       : str_cat("schedule.min_lr: expected at most optim.lr = ", format_number(lr), ", got ",
                                 format_number(m));
      },
      [](const Config& c) -> std::string {
        if (c.get_string("data.tokenizer_file").empty()) return "";
        for (const char* key : {"data.tokenizer", "data.bpe_vocab_size"}) {
          if (c.get(key) != default_of(key))
            return str_cat(key, ": is for training a tokenizer, but data.tokenizer_file names one to use as it is; "
                           "remove one of them");
        }
        return "";
      },
      [](const Config& c) -> std::string {
        const bool llama = c.get_string("model.arch") == "llama";
        if (!llama) {
          for (const char* key : {"model.n_kv_head", "model.rope_theta", "model.qkv_bias"}) {
            if (c.get(key) != default_of(key))
              return str_cat(key, ": applies to model.arch = \"llama\" only (model.arch is \"gpt2\"), got ",
                             format_value(c.get(key)), "; remove it or set model.arch = \"llama\"");
          }
          return "";
        }
        const int64_t h = c.get_int("model.n_head"), kv = c.get_int("model.n_kv_head"), d = c.get_int("model.d_model");
        if (kv != 0 && h % kv != 0)
          return str_cat("model.n_kv_head: expected a divisor of model.n_head = ", h, ", got ", kv, "; set it to one of ",
                         divisors(h));
        if (d % h == 0 && (d / h) % 2 != 0)
          return str_cat("model.n_head: rotary embeddings (model.arch = \"llama\") need an even head size, but ",
                         "model.d_model / model.n_head = ", d, " / ", h, " = ", d / h);
        if (c.get_bool("model.bias"))
          return "model.bias: model.arch = \"llama\" has no biases in its norms, output projections or MLP; "
                 "use model.qkv_bias for the q, k and v biases (Qwen2)";
        return "";
      },
      [](const Config& c) -> std::string {
        if (c.get_string("model.arch") != "llama") return "";
        const int64_t tp = c.get_int("parallel.tp"), kv = c.get_int("model.n_kv_head");
        if (kv == 0 || kv % tp == 0) return "";
        return str_cat("parallel.tp: expected a divisor of model.n_kv_head = ", kv, " (each tensor-parallel rank holds ",
                       "whole key/value heads; they are split, not replicated), got ", tp, "; set parallel.tp to one of ",
                       divisors(kv));
      },
      // [parallel] against the model and the batch (the world size is checked by the trainer).
      [](const Config& c) -> std::string {
        int64_t tp = c.get_int("parallel.tp"), h = c.get_int("model.n_head");
        return h % tp == 0 ? ""
                           : str_cat("parallel.tp: expected a divisor of model.n_head = ", h, " (each tensor-parallel ",
                                     "rank holds whole heads), got ", tp, "; set parallel.tp to one of ",
                                     divisors(h), " or change model.n_head");
      },
      [](const Config& c) -> std::string {
        int64_t pp = c.get_int("parallel.pp"), v = c.get_int("parallel.virtual_stages"), n = c.get_int("model.n_layer");
        bool inter = c.get_string("parallel.schedule") == "interleaved";
        int64_t pieces = pp * (inter ? v : 1);
        if (pieces <= n) return "";
        return inter ? str_cat("parallel.pp: pp x virtual_stages = ", pp, " x ", v, " = ", pieces,
                               " model pieces, but model.n_layer = ", n, " (each piece needs at least one layer); ",
                               "lower parallel.pp or parallel.virtual_stages, or add layers")
                     : str_cat("parallel.pp: expected at most model.n_layer = ", n,
                               " (each pipeline stage needs at least one layer), got ", pp);
      },
      [](const Config& c) -> std::string {
        int64_t dp = c.get_int("parallel.dp"), m = c.get_int("parallel.micro_batches"), b = c.get_int("train.batch_size");
        return b % (dp * m) == 0
                   ? ""
                   : str_cat("train.batch_size: expected a multiple of parallel.dp x parallel.micro_batches = ", dp,
                             " x ", m, " = ", dp * m, " (every dp rank splits its batch_size / dp sequences into ",
                             "equal micro-batches), got ", b, " (the next multiple is ", (b / (dp * m) + 1) * dp * m,
                             "); change train.batch_size, parallel.dp or parallel.micro_batches");
      },
      [](const Config& c) -> std::string {
        if (!c.get_bool("parallel.sequence_parallel")) return "";
        if (c.get_int("parallel.tp") < 2)
          return "parallel.sequence_parallel: shards activations over the tensor-parallel ranks, but parallel.tp = 1; "
                 "set parallel.tp >= 2 or parallel.sequence_parallel = false";
        if (c.get_int("parallel.pp") > 1)
          return str_cat("parallel.sequence_parallel: pipeline stages do not shard their activations yet, but ",
                         "parallel.pp = ", c.get_int("parallel.pp"), "; set parallel.pp = 1 or ",
                         "parallel.sequence_parallel = false");
        return "";
      },
      [](const Config& c) -> std::string {
        const int64_t zero = c.get_int("parallel.zero");
        if (zero == 0) return "";
        if (c.get_string("optim.name") != "adamw")
          return str_cat("parallel.zero: ZeRO-", zero, " shards AdamW's state, but optim.name = \"", c.get_string("optim.name"),
                         "\"; set optim.name = \"adamw\" or parallel.zero = 0");
        if (zero == 3 && c.get_int("parallel.pp") > 1)
          return str_cat("parallel.zero: ZeRO-3 gathers each block's parameters around its forward and backward, which "
                         "pipeline stages do not do yet, but parallel.pp = ", c.get_int("parallel.pp"),
                         "; set parallel.zero = 2 (or 1) with pipelines, or parallel.pp = 1");
        return "";
      },
      lora_checks,
      finetune_checks,
      chat_template_checks,
      [](const Config& c) -> std::string {
        int64_t v = c.get_int("parallel.virtual_stages");
        bool inter = c.get_string("parallel.schedule") == "interleaved";
        if (v > 1 && !inter)
          return str_cat("parallel.virtual_stages: ", v, " chunks per pipeline rank need parallel.schedule = ",
                         "\"interleaved\", got \"", c.get_string("parallel.schedule"), "\"");
        int64_t pp = c.get_int("parallel.pp"), m = c.get_int("parallel.micro_batches");
        if (inter && pp > 1 && m % pp != 0)
          return str_cat("parallel.micro_batches: the interleaved schedule needs a multiple of parallel.pp = ", pp,
                         ", got ", m);
        return "";
      },
  };
  return checks;
}

const ConfigKey* find_key(const std::string& path) {
  for (const auto& k : train_config_schema()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

std::vector<std::string> section_names() {
  std::vector<std::string> out;
  for (const auto& k : train_config_schema()) {
    std::string s = k.path.substr(0, k.path.find('.'));
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

bool is_section(const std::string& name) {
  auto s = section_names();
  return std::find(s.begin(), s.end(), name) != s.end();
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance: edits plus swaps of neighbours ("modle" -> "model" is 1).
  std::vector<size_t> pprev(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], pprev[j - 2] + 1);
    }
    std::swap(pprev, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string leaf(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The closest known name, compared both as a whole path and by the last component (so
// `train.lr` suggests `optim.lr`), or "" when nothing is close.
std::string suggest(const std::string& path, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_score = SIZE_MAX;
  std::string l = leaf(path);
  const size_t limit = std::max<size_t>(1, std::min<size_t>(2, l.size() / 3));
  // Strings whose lengths differ by more than the limit are further apart than it: skipping them
  // keeps a long mistyped key (or a hostile one) from costing a full distance per candidate.
  const auto distance = [limit](std::string_view a, std::string_view b) {
    return (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size()) > limit ? SIZE_MAX : edit_distance(a, b);
  };
  for (const auto& c : candidates) {
    size_t score = std::min(distance(path, c), distance(l, leaf(c)));
    if (score <= limit && score < best_score) best = c, best_score = score;
  }
  return best;
}

std::string unknown_message(const std::string& path, bool as_section) {
  std::vector<std::string> candidates;
  if (as_section) {
    candidates = section_names();
  } else {
    for (const auto& k : train_config_schema()) candidates.push_back(k.path);
  }
  std::string s = suggest(path, candidates);
  std::string hint = s.empty() ? "" : (as_section ? " (did you mean [" + s + "]?)" : " (did you mean '" + s + "'?)");
  return as_section ? "unknown section [" + path + "]" + hint : "unknown key '" + path + "'" + hint;
}

// Range, choices and custom check.
bool value_ok(const ConfigKey& k, const ConfigValue& v) {
  if (k.type == ConfigType::integer || k.type == ConfigType::floating) {
    double x = k.type == ConfigType::integer ? double(std::get<int64_t>(v)) : std::get<double>(v);
    if (!std::isfinite(x)) return false;
    if (k.min && (k.min_exclusive ? !(x > *k.min) : !(x >= *k.min))) return false;
    if (k.max && (k.max_exclusive ? !(x < *k.max) : !(x <= *k.max))) return false;
  }
  if (!k.choices.empty()) {
    const auto& s = std::get<std::string>(v);
    if (std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end()) return false;
  }
  return !k.check || k.check(v);
}

std::string value_error(const ConfigKey& k, const std::string& got, const std::string& location) {
  return k.path + ": expected " + k.expectation() + ", got " + got + location;
}

// Converts a TOML node to the key's type; nullopt when the type is wrong.
std::optional<ConfigValue> convert(const ConfigKey& k, const toml::node& n) {
  switch (k.type) {
    case ConfigType::integer:
      if (auto v = n.as_integer()) return ConfigValue(v->get());
      if (auto v = n.as_boolean(); v && k.reads_booleans) return ConfigValue(int64_t(v->get()));
      break;
    case ConfigType::floating:
      if (auto v = n.as_floating_point()) return ConfigValue(v->get());
      if (auto v = n.as_integer()) return ConfigValue(double(v->get()));
      break;
    case ConfigType::boolean:
      if (auto v = n.as_boolean()) return ConfigValue(v->get());
      break;
    case ConfigType::string:
      if (auto v = n.as_string()) return ConfigValue(v->get());
      break;
    case ConfigType::string_list:
      if (auto v = n.as_string()) return ConfigValue(std::vector<std::string>{v->get()});
      if (auto a = n.as_array()) {
        std::vector<std::string> out;
        for (const auto& e : *a) {
          if (!e.is_string()) return std::nullopt;
          out.push_back(e.as_string()->get());
        }
        return ConfigValue(std::move(out));
      }
      break;
  }
  return std::nullopt;
}

void walk(const toml::table& table, const std::string& prefix, const std::string& source,
          std::map<std::string, ConfigValue>& values, std::vector<std::string>& errors) {
  for (auto&& [key, node] : table) {
    std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const ConfigKey* k = find_key(path)) {
      auto v = convert(*k, node);
      if (!v || !value_ok(*k, *v)) {
        errors.push_back(value_error(*k, describe(node), where(node, source)));
      } else {
        values[path] = std::move(*v);
      }
    } else if (prefix.empty() && is_section(path)) {
      if (auto t = node.as_table()) {
        walk(*t, path, source, values, errors);
      } else {
        errors.push_back(str_cat(path, ": expected a table (section [", path, "]), got ", describe(node),
                                 where(node, source)));
      }
    } else {
      errors.push_back(unknown_message(path, node.is_table()) + where(node, source));
    }
  }
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// Reads `text` as one TOML value; nullopt when it is not valid TOML.
std::optional<toml::table> parse_toml_value(const std::string& text) {
  try {
    return toml::parse(std::string_view("v = " + text), std::string_view("--set"));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

// Applies one "key=value" to values; returns "" or the error.
std::string apply_override(const std::string& assignment, std::map<std::string, ConfigValue>& values) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos) return "--set expects key=value, got '" + assignment + "'";
  std::string path = trim(std::string_view(assignment).substr(0, eq));
  std::string text = trim(std::string_view(assignment).substr(eq + 1));
  std::string location = " (--set " + assignment + ")";
  const ConfigKey* k = find_key(path);
  if (!k) return unknown_message(path, is_section(path)) + location;
  if (!utf8_is_valid(text)) return path + ": the value is not valid UTF-8" + location;
  std::optional<ConfigValue> v;
  bool bare_string = (k->type == ConfigType::string || k->type == ConfigType::string_list) &&
                     !(text.starts_with('"') || text.starts_with('\'') || text.starts_with('['));
  if (bare_string) {
    v = k->type == ConfigType::string ? ConfigValue(text) : ConfigValue(std::vector<std::string>{text});
  } else if (auto t = parse_toml_value(text)) {
    v = convert(*k, *t->get("v"));
  }
  if (!v || !value_ok(*k, *v)) return value_error(*k, text, location);
  values[path] = std::move(*v);
  return "";
}

[[noreturn]] void throw_errors(const std::vector<std::string>& errors) {
  std::string msg;
  for (size_t i = 0; i < errors.size(); ++i) msg += (i ? "\n" : "") + errors[i];
  throw ConfigError(msg);
}

}  // namespace

std::string ParallelConfig::describe() const { return str_cat("dp=", dp, " tp=", tp, " pp=", pp); }

std::string ConfigKey::expectation() const {
  std::string base;
  switch (type) {
    case ConfigType::integer: base = "an integer"; break;
    case ConfigType::floating: base = "a float"; break;
    case ConfigType::boolean: return "a boolean (true or false)";
    case ConfigType::string: base = "a string"; break;
    case ConfigType::string_list: base = "a string or an array of strings"; break;
  }
  if (!choices.empty()) {
    std::string out = "one of ";
    for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + toml_quote(choices[i]);
    return out;
  }
  if (check) return check_expects;
  // Integer bounds in full ("1000000000000", not "1e+12"): they are what the user types.
  auto bound = [this](double b) { return type == ConfigType::integer ? std::to_string(int64_t(b)) : format_number(b); };
  if (min && max) {
    return str_cat(base, " in ", min_exclusive ? "(" : "[", bound(*min), ", ", bound(*max), max_exclusive ? ")" : "]",
                   reads_booleans ? " (true = 1, false = 0)" : "");
  }
  if (min) return str_cat(base, min_exclusive ? " > " : " >= ", bound(*min));
  if (max) return str_cat(base, max_exclusive ? " < " : " <= ", bound(*max));
  return base;
}

const std::vector<ConfigKey>& train_config_schema() {
  static const std::vector<ConfigKey> schema = build_schema();
  return schema;
}

Config::Config() {
  for (const auto& k : train_config_schema()) values_[k.path] = k.default_value;
}

Config Config::parse(std::string_view toml_text, const std::string& source, const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw ConfigError(str_cat(source, " line ", e.source().begin.line, ", column ", e.source().begin.column,
                              ": TOML syntax error: ", e.description()));
  }
  Config c;
  std::vector<std::string> errors;
  walk(root, "", source, c.values_, errors);
  for (const auto& o : overrides) {
    std::string e = apply_override(o, c.values_);
    if (!e.empty()) errors.push_back(e);
  }
  if (errors.empty()) {
    for (const auto& check : cross_checks()) {
      std::string e = check(c);
      if (!e.empty()) errors.push_back(e);
    }
  }
  if (!errors.empty()) throw_errors(errors);
  return c;
}

Config Config::load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot open config file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path, overrides);
}

void Config::set(const std::string& assignment) {
  Config next = *this;
  std::string e = apply_override(assignment, next.values_);
  if (!e.empty()) throw ConfigError(e);
  std::vector<std::string> errors;
  for (const auto& check : cross_checks()) {
    std::string ce = check(next);
    if (!ce.empty()) errors.push_back(ce);
  }
  if (!errors.empty()) throw_errors(errors);
  *this = std::move(next);
}

const ConfigValue& Config::get(const std::string& path) const {
  auto it = values_.find(path);
  if (it == values_.end()) throw ConfigError(unknown_message(path, false));
  return it->second;
}

TrainConfig Config::resolve() const {
  TrainConfig tc;
  for (const auto& k : train_config_schema()) k.store(tc, values_.at(k.path));
  return tc;
}

std::string Config::to_toml() const {
  std::string out = "# trireme training configuration: every key, resolved\n";
  std::string section;
  for (const auto& k : train_config_schema()) {
    std::string s = k.path.substr(0, k.path.find('.'));
    if (s != section) {
      out += "\n[" + s + "]\n";
      section = s;
    }
    std::string line = leaf(k.path) + " = " + format_value(values_.at(k.path));
    if (line.size() < 32) line.append(32 - line.size(), ' ');
    out += line + "  # " + k.help + "\n";
  }
  return out;
}

std::string config_help() {
  std::ostringstream os;
  os << "Configuration keys (TOML sections; override any with --set section.key=value):\n";
  for (const auto& k : train_config_schema()) {
    os << "  " << k.path << " = " << format_value(k.default_value) << "\n      " << k.help << "; "
       << k.expectation() << "\n";
  }
  return os.str();
}

}  // namespace trireme::io
