// `trireme eval --checkpoint DIR --text FILE`: the perplexity of a trained checkpoint on a text,
// in nats and bits per token and per character.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/core/device.h"
#include "trireme/io/config.h"
#include "trireme/io/file_write.h"
#include "trireme/train/evaluate.h"
#include "trireme/train/trained_model.h"

namespace trireme::cli {

Command add_eval_command(CLI::App& root) {
  struct Options {
    std::string checkpoint, text, device = "cpu";
    int64_t stride = 0, batch_size = 8;
    bool no_memory_check = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("eval", "Perplexity of a trained checkpoint on a text (per token and per character)");
  app->add_option("--checkpoint", opt->checkpoint, "checkpoint folder, a run's out_dir (uses its latest), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--text", opt->text, "UTF-8 text file to score")->required()->check(CLI::ExistingFile);
  app->add_option("--stride", opt->stride,
                  "tokens between window starts; 0 = the model's block_size (non-overlapping windows); smaller "
                  "gives each token more context")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  app->add_option("--batch-size", opt->batch_size, "windows per forward pass")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  add_device_option(app, opt->device);
  add_memory_check_flag(app, opt->no_memory_check);
  return {app, [opt] {
            try {
              const std::string text = io::read_file(opt->text);
              if (text.empty()) throw train::EvalInputError(str_cat("--text ", opt->text, " is empty; give a text of at least 2 tokens"));
              train::TrainedModel m = train::load_trained_model(opt->checkpoint, Device::parse(opt->device), "eval",
                                                                  !opt->no_memory_check);
              const int64_t T = m.model->config().block_size;
              if (opt->stride > T) {
                throw train::EvalInputError(str_cat("--stride ", opt->stride, " is larger than the model's block_size ", T,
                                                    "; use at most ", T, " (0 = ", T, ")"));
              }
              const train::TextScore s = train::score_text(*m.model, *m.tokenizer, text,
                                                           {.stride = opt->stride, .batch_size = opt->batch_size},
                                                           "--text " + opt->text);
              std::printf("checkpoint: %s (step %lld; block_size %lld, %s tokenizer of %lld tokens)\n", m.dir.string().c_str(),
                          (long long)m.step, (long long)T, m.tokenizer->type().c_str(),
                          (long long)m.tokenizer->vocab_size());
              std::printf("text: %s: %lld tokens, %lld predicted (%lld characters), %lld window(s) of up to %lld, stride %lld\n",
                          opt->text.c_str(), (long long)s.tokens, (long long)s.scored_tokens, (long long)s.scored_characters,
                          (long long)s.windows, (long long)T, (long long)s.stride);
              std::printf("per token:     %.4f nats  %.4f bits  (perplexity %.3f)\n", s.nats_per_token, s.bits_per_token,
                          s.perplexity);
              std::printf("per character: %.4f nats  %.4f bits\n", s.nats_per_char, s.bits_per_char);
              if (s.unknown_tokens > 0) {
                std::fprintf(stderr,
                             "trireme eval: warning: %lld character(s) of the text are not in the tokenizer's vocabulary "
                             "and were scored as <unk>\n",
                             (long long)s.unknown_tokens);
              }
              return kExitOk;
            } catch (const train::EvalInputError& e) {
              std::fprintf(stderr, "trireme eval: error: %s\n", e.what());
              return kExitUsage;
            } catch (const io::ConfigError& e) {
              std::fprintf(stderr, "trireme eval: error: %s\n", e.what());
              return kExitUsage;
            }
          }};
}

}  // namespace trireme::cli
