// `trireme generate --checkpoint DIR --prompt TEXT`: sample text, streamed as it is produced.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "trireme/cli/commands.h"
#include "trireme/io/config.h"
#include "trireme/io/file_write.h"
#include "trireme/io/utf8.h"
#include "trireme/train/generate.h"

namespace trireme::cli {

Command add_generate_command(CLI::App& root) {
  struct Options {
    std::string checkpoint, prompt, prompt_file, device = "cpu", mode = "eager";
    int64_t max_new_tokens = 100, top_k = 0, num_samples = 1;
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 0;
    bool no_memory_check = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("generate", "Generate text from a trained checkpoint");
  app->add_option("--checkpoint", opt->checkpoint, "checkpoint folder, a run's out_dir (uses its latest), or a Hugging Face model folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  CLI::Option* prompt =
      app->add_option("-p,--prompt", opt->prompt, "text to continue (UTF-8); empty: start from a newline");
  app->add_option("--prompt-file", opt->prompt_file, "read the prompt from this UTF-8 file instead")
      ->check(CLI::ExistingFile)
      ->excludes(prompt);
  app->add_option("-n,--max-new-tokens", opt->max_new_tokens, "tokens to generate per sample")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app->add_option("-t,--temperature", opt->temperature, "softmax temperature; 0 = greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app->add_option("-k,--top-k", opt->top_k, "sample among the k most likely tokens; 0 = all")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  app->add_option("--top-p", opt->top_p,
                  "sample among the most likely tokens whose probabilities add up to p (nucleus); 1 = all")
      ->check(CLI::Validator(
          [](const std::string& v) {
            const double p = std::strtod(v.c_str(), nullptr);
            return p > 0 && p <= 1 ? std::string() : "expected a number in (0, 1], not '" + v + "'";
          },
          "in (0, 1]"))
      ->capture_default_str();
  app->add_option("--num-samples", opt->num_samples, "independent samples to draw from the prompt")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app->add_option("--seed", opt->seed, "sampling seed")->capture_default_str();
  app->add_option("--mode", opt->mode,
                  "eager, or static: trace the forward once per context length bucket and replay it "
                  "(docs/STATIC_GRAPH.md)")
      ->check(CLI::IsMember({"eager", "static"}))
      ->capture_default_str();
  add_device_option(app, opt->device);
  add_memory_check_flag(app, opt->no_memory_check);
  return {app, [opt] {
            const std::string source = opt->prompt_file.empty() ? "--prompt" : "--prompt-file " + opt->prompt_file;
            const std::string text = opt->prompt_file.empty() ? opt->prompt : io::read_file(opt->prompt_file);
            // Checked before the model loads: a bad prompt costs nothing.
            if (size_t bad = io::utf8_find_invalid(text); bad != std::string::npos) {
              std::fprintf(stderr, "trireme generate: error: %s is not valid UTF-8 (byte %zu of %zu); give UTF-8 text\n",
                           source.c_str(), bad, text.size());
              return kExitUsage;
            }
            std::optional<train::TextGenerator> g;
            try {
              g.emplace(train::load_generator(opt->checkpoint, Device::parse(opt->device), !opt->no_memory_check));
            } catch (const io::ConfigError& e) {  // the checkpoint's config fails validation
              std::fprintf(stderr, "trireme generate: error: %s\n", e.what());
              return kExitUsage;
            }
            if (opt->mode == "static") g->set_mode(train::GenerateMode::static_graph);
            if (std::string problem = train::prompt_problem(g->tokenizer(), text); !problem.empty()) {
              std::fprintf(stderr, "trireme generate: error: %s: %s\n", source.c_str(), problem.c_str());
              return kExitUsage;
            }
            for (int64_t i = 0; i < opt->num_samples; ++i) {
              if (opt->num_samples > 1) std::printf("%s=== sample %lld of %lld ===\n", i ? "\n" : "", (long long)i + 1,
                                                    (long long)opt->num_samples);
              std::printf("%s", text.c_str());
              std::fflush(stdout);
              g->generate(text,
                         {.max_new_tokens = opt->max_new_tokens, .temperature = opt->temperature, .top_k = opt->top_k,
                          .top_p = opt->top_p, .seed = opt->seed, .sample = uint64_t(i)},
                         [](std::string_view piece) {
                           std::fwrite(piece.data(), 1, piece.size(), stdout);
                           std::fflush(stdout);
                         });
              std::printf("\n");
            }
            return kExitOk;
          }};
}

}  // namespace trireme::cli
