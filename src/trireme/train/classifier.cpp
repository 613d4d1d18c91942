// Sequence classification (see classifier.h).
#include "trireme/train/classifier.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "trireme/autograd/grad_mode.h"
#include "trireme/io/data_loader.h"
#include "trireme/io/file_write.h"
#include "trireme/io/labeled_text.h"
#include "trireme/models/lora.h"
#include "trireme/nn/linear.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/nn_functional.h"
#include "trireme/ops/view.h"
#include "trireme/optim/clip_grad.h"
#include "trireme/optim/lr_schedule.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/classification_metrics.h"
#include "trireme/train/finetune_data.h"
#include "trireme/train/lora_adapters.h"
#include "trireme/train/run_dir.h"
#include "trireme/train/step_runner.h"
#include "trireme/train/trained_model.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {

struct Encoded {
  std::vector<std::vector<int32_t>> ids;
  std::vector<int> labels;
};

Encoded encode(const std::vector<io::LabeledText>& examples, const io::Tokenizer& tok,
               const std::vector<std::string>& labels, int64_t block_size, const std::string& file) {
  Encoded e;
  for (const auto& ex : examples) {
    auto it = std::find(labels.begin(), labels.end(), ex.label);
    if (it == labels.end()) {
      std::string set;
      for (const auto& l : labels) set += (set.empty() ? "\"" : ", \"") + l + "\"";
      throw io::ConfigError(str_cat(file, " line ", ex.line, ": label \"", ex.label, "\" is not in the label set (",
                                    set, "); fix the line or add the label to finetune.labels"));
    }
    std::vector<int32_t> ids = tok.encode(ex.text);
    if (int64_t(ids.size()) > block_size) ids.resize(size_t(block_size));
    e.ids.push_back(std::move(ids));
    e.labels.push_back(int(it - labels.begin()));
  }
  return e;
}

// Rows `rows` of e as (ids right-padded with 0, labels, last real position per row).
struct ClassBatch {
  Tensor ids, labels;
  std::vector<int64_t> last;
};
ClassBatch make_batch(const Encoded& e, const std::vector<size_t>& rows) {
  size_t T = 1;
  for (size_t r : rows) T = std::max(T, e.ids[r].size());
  std::vector<int64_t> ids(rows.size() * T, 0), labels;
  ClassBatch b;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& x = e.ids[rows[i]];
    std::copy(x.begin(), x.end(), ids.begin() + int64_t(i * T));
    labels.push_back(e.labels[rows[i]]);
    b.last.push_back(int64_t(std::max<size_t>(x.size(), 1)) - 1);
  }
  b.ids = from_vector(ids, {int64_t(rows.size()), int64_t(T)});
  b.labels = from_vector(labels, {int64_t(rows.size())});
  return b;
}

// The head's input: each row's final-norm state at its last token (causal attention: padding
// after it changes nothing before it).
Tensor pooled(models::GPT& gpt, const ClassBatch& b) {
  const Tensor h = gpt.hidden(b.ids);  // (B, T, d)
  std::vector<Tensor> rows;
  for (size_t i = 0; i < b.last.size(); ++i) rows.push_back(narrow(narrow(h, 0, int64_t(i), 1), 1, b.last[i], 1));
  return reshape(cat(rows, 0), {int64_t(b.last.size()), h.size(2)});
}

nn::NamedTensors with_prefix(const nn::NamedTensors& ts, const std::string& prefix) {
  nn::NamedTensors out;
  for (const auto& [n, t] : ts) out.emplace_back(prefix + n, t);
  return out;
}

}  // namespace

ClassifierSummary run_classifier(const io::Config& config, const TrainOptions& options) {
  const io::TrainConfig cfg = config.resolve();
  const io::FinetuneConfig& f = cfg.finetune;
  auto log = [&](const std::string& s) {
    if (!options.quiet) std::fprintf(stderr, "%s\n", s.c_str());
  };
  const fs::path out = cfg.train.out_dir;
  fs::create_directories(out);
  RunLock lock(out);
  if (options.resume && options.overwrite)
    throw RunRefused("--resume continues the run in train.out_dir and --overwrite removes it; give one of them");
  if (!options.resume) {
    if (auto what = earlier_run(out)) {
      if (!options.overwrite) throw RunRefused(earlier_run_refusal(out, *what));
      remove_earlier_run(out);
    }
  }
  std::optional<fs::path> resume_from = options.resume ? find_latest_checkpoint(out / "checkpoints") : std::nullopt;
  if (!resume_from && options.init_from.empty())
    throw io::ConfigError("finetune.task = \"classify\": a classifier starts from a trained model; give --init-from "
                          "CHECKPOINT|RUN|HF_DIR");

  // The examples and the label set (a resumed run keeps its own).
  const bool skip = f.bad_lines == "skip";
  io::LabeledFile train_file = io::read_labeled_file(f.train_file, skip);
  std::vector<io::LabeledText> train_ex, val_ex;
  std::string val_name = f.val_file;
  if (!f.val_file.empty()) {
    train_ex = std::move(train_file.examples);
    val_ex = io::read_labeled_file(f.val_file, skip).examples;
  } else {
    val_name = f.train_file;
    const auto held = held_out_examples(train_file.examples.size(), f.val_fraction, uint64_t(cfg.data.split_seed));
    if (held.empty()) throw io::ConfigError(str_cat("finetune.train_file: too few examples to hold some out; give finetune.val_file"));
    for (size_t i = 0; i < train_file.examples.size(); ++i)
      (std::binary_search(held.begin(), held.end(), i) ? val_ex : train_ex).push_back(train_file.examples[i]);
  }
  Checkpoint resumed;
  if (resume_from) resumed = load_checkpoint(*resume_from);
  std::vector<std::string> labels = f.labels;
  if (resume_from && resumed.state.contains("labels")) labels = resumed.state["labels"].get<std::vector<std::string>>();
  if (labels.empty()) {
    std::set<std::string> seen;
    for (const auto& ex : train_ex) seen.insert(ex.label);
    labels.assign(seen.begin(), seen.end());
  }
  if (labels.size() < 2) throw io::ConfigError("finetune.labels: a classifier needs at least two labels");

  // The model: the base's weights (or the run's own on resume) and a head over the labels.
  std::unique_ptr<io::Tokenizer> tok =
      resume_from ? io::tokenizer_from_json(resumed.state["tokenizer"]) : tokenizer_of(options.init_from, "finetune");
  const Encoded train = encode(train_ex, *tok, labels, cfg.model.block_size, f.train_file);
  const Encoded val = encode(val_ex, *tok, labels, cfg.model.block_size, val_name);
  models::GPT gpt(gpt_config(cfg, tok->vocab_size()), uint64_t(cfg.train.seed));
  if (cfg.lora.rank > 0) {
    gpt.add_lora({.rank = cfg.lora.rank, .alpha = cfg.lora.alpha, .dropout = cfg.lora.dropout,
                  .seed = uint64_t(cfg.train.seed)},
                 cfg.lora.targets);
  }
  auto head = std::make_shared<nn::Linear>(cfg.model.d_model, int64_t(labels.size()));
  head->reset_parameters(uint64_t(cfg.train.seed));
  if (!resume_from) {
    TrainedModel base = load_trained_model(options.init_from, Device::cpu(), "finetune", /*memory_check=*/false);
    std::map<std::string, Tensor> full;
    for (auto& [n, t] : base.model->full_state_dict()) full[n] = t;
    for (auto& [n, t] : gpt.named_parameters()) {
      if (models::is_lora_name(n)) {
        full[n] = t.detach();
        continue;
      }
      auto it = full.find(n);
      if (it == full.end() || it->second.sizes() != t.sizes())
        throw io::ConfigError(str_cat("--init-from '", options.init_from, "': '", n, "' is ",
                                      it == full.end() ? std::string("missing") : str_cat(it->second.sizes()),
                                      " there but ", t.sizes(), " in this run's model; set [model] to match"));
    }
    gpt.load_full_state_dict(full);
  } else {
    std::map<std::string, Tensor> state(resumed.model.begin(), resumed.model.end()), body, head_state;
    for (auto& [n, t] : state) (n.rfind("classifier.", 0) == 0 ? head_state[n.substr(11)] : body[n]) = t;
    gpt.load_full_state_dict(body);
    head->load_state_dict(head_state);
  }
  optim::NamedParams params = with_prefix(head->named_parameters(), "classifier.");
  for (auto& [n, p] : gpt.named_parameters())
    if (p.requires_grad()) params.emplace_back(n, p);
  auto optimizer = make_optimizer(cfg, params);
  int64_t start = 0;
  if (resume_from) {
    optimizer->load_state_dict({resumed.optimizer.begin(), resumed.optimizer.end()});
    start = resumed.step;
  }
  std::unique_ptr<optim::LrSchedule> schedule;
  if (cfg.schedule.kind == "cosine") {
    schedule = std::make_unique<optim::WarmupCosineLr>(
        optim::WarmupCosineOptions{.max_lr = cfg.optim.lr, .min_lr = cfg.schedule.min_lr,
                                   .warmup_steps = cfg.schedule.warmup_steps, .total_steps = cfg.train.steps});
  } else {
    schedule = std::make_unique<optim::ConstantLr>(cfg.optim.lr);
  }

  ClassifierSummary sum;
  sum.labels = labels;
  std::vector<int> counts(labels.size(), 0);
  for (int l : train.labels) ++counts[size_t(l)];
  const int majority = int(std::max_element(counts.begin(), counts.end()) - counts.begin());
  for (int l : val.labels) sum.majority_accuracy += l == majority;
  sum.majority_accuracy /= double(val.labels.size());
  int trainable = 0;
  for (auto& [n, p] : params) trainable += int(p.numel());
  log(str_cat("classify: ", train.labels.size(), " training and ", val.labels.size(), " validation texts, ", labels.size(),
              " labels; ", trainable, " trainable parameters", cfg.lora.rank > 0 ? " (LoRA adapters and the head)" : "",
              train_file.skipped ? str_cat("; ", train_file.skipped, " malformed line(s) skipped") : "",
              "; majority-class baseline (\"", labels[size_t(majority)], "\") ", sum.majority_accuracy));

  const int64_t B = cfg.train.batch_size;
  auto evaluate = [&](nlohmann::json& line) {
    NoGradGuard no_grad;
    gpt.eval();
    std::vector<int> predicted;
    double loss = 0;
    for (size_t first = 0; first < val.labels.size(); first += size_t(B)) {
      std::vector<size_t> rows;
      for (size_t i = first; i < std::min(val.labels.size(), first + size_t(B)); ++i) rows.push_back(i);
      const ClassBatch b = make_batch(val, rows);
      const Tensor logits = head->forward(pooled(gpt, b));
      loss += cross_entropy(logits, b.labels).item() * double(rows.size());
      const auto v = contiguous(logits).to_vector<float>();
      for (size_t i = 0; i < rows.size(); ++i) {
        const float* row = v.data() + i * labels.size();
        predicted.push_back(int(std::max_element(row, row + labels.size()) - row));
      }
    }
    gpt.train();
    const ClassificationMetrics m = classification_metrics(val.labels, predicted, int(labels.size()));
    sum.val_accuracy = m.accuracy, sum.val_macro_f1 = m.macro_f1, sum.val_loss = loss / double(val.labels.size());
    line["val_loss"] = sum.val_loss, line["val_accuracy"] = m.accuracy, line["val_macro_f1"] = m.macro_f1;
    line["majority_accuracy"] = sum.majority_accuracy;
  };
  auto save = [&](int64_t step) {
    Checkpoint ck;
    ck.step = step;
    ck.model = gpt.full_state_dict();
    for (auto& nt : with_prefix(head->named_parameters(), "classifier.")) ck.model.push_back(nt);
    ck.optimizer = optimizer->state_dict();
    ck.state = {{"config", config.to_toml()}, {"tokenizer", tok->to_json()}, {"labels", labels},
                {"task", "classify"}};
    const fs::path dir = save_checkpoint(out / "checkpoints", ck);
    const nn::NamedTensors adapters = models::lora_tensors(ck.model);
    if (!adapters.empty()) save_adapters(dir / "adapters.safetensors", adapters, cfg.lora);
    sum.checkpoint_path = dir.string();
  };

  sum.metrics_path = (out / "metrics.jsonl").string();
  io::AppendFile metrics(sum.metrics_path, start > 0 ? io::AppendFile::Mode::kAppend : io::AppendFile::Mode::kTruncate);
  gpt.train();
  const uint64_t n = train.labels.size();
  const int64_t last = options.stop_after > 0 ? std::min(options.stop_after, cfg.train.steps) : cfg.train.steps;
  int64_t step = start;
  for (; step < last; ++step) {
    optimizer->set_lr(schedule->lr(step));
    gpt.set_rng(uint64_t(cfg.train.seed), uint64_t(step));
    // Sample k of the run is training text perm_e(k mod n) of epoch e = k / n (io/data_loader.h).
    std::vector<size_t> rows;
    for (int64_t k = step * B; k < (step + 1) * B; ++k)
      rows.push_back(size_t(io::permute_index(uint64_t(k) % n, n, uint64_t(cfg.train.seed), uint64_t(k) / n)));
    const ClassBatch b = make_batch(train, rows);
    Tensor loss = cross_entropy(head->forward(pooled(gpt, b)), b.labels);
    loss.backward();
    if (cfg.optim.grad_clip > 0) optim::clip_grad_norm(params, cfg.optim.grad_clip);
    optimizer->step();
    optimizer->zero_grad();
    const double l = loss.item();
    TRIREME_CHECK(std::isfinite(l), "classify: the loss is ", l, " at step ", step + 1, " (try a lower optim.lr)");
    sum.losses.push_back(l);
    const int64_t done = step + 1;
    nlohmann::json line{{"step", done}, {"loss", l}, {"lr", schedule->lr(step)}};
    if ((cfg.train.eval_interval > 0 && done % cfg.train.eval_interval == 0) || done == cfg.train.steps) {
      evaluate(line);
      log(str_cat("step ", done, ": loss ", l, ", val_accuracy ", sum.val_accuracy, ", val_macro_f1 ", sum.val_macro_f1,
                  " (majority baseline ", sum.majority_accuracy, ")"));
    }
    metrics.write_line(line.dump());
    if ((cfg.train.checkpoint_interval > 0 && done % cfg.train.checkpoint_interval == 0) || done == last) {
      metrics.sync();
      save(done);
    }
  }
  sum.steps = step;
  return sum;
}

}  // namespace trireme::train
