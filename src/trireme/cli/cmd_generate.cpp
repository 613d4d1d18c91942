// `trireme generate --checkpoint DIR --prompt TEXT`: sample text, streamed as it is produced.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/train/generate.h"

namespace trireme::cli {

Command add_generate_command(CLI::App& root) {
  struct Options {
    std::string checkpoint, prompt, device = "cpu";
    int64_t max_new_tokens = 100, top_k = 0;
    double temperature = 1.0;
    uint64_t seed = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("generate", "Generate text from a trained checkpoint");
  app->add_option("--checkpoint", opt->checkpoint, "checkpoint folder, or a run's out_dir (uses its latest)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("-p,--prompt", opt->prompt, "text to continue")->required();
  app->add_option("-n,--max-new-tokens", opt->max_new_tokens, "tokens to generate")->check(CLI::Range(0, 100000));
  app->add_option("-t,--temperature", opt->temperature, "softmax temperature; 0 = greedy")->check(CLI::Range(0.0, 100.0));
  app->add_option("-k,--top-k", opt->top_k, "sample among the k most likely tokens; 0 = all")->check(CLI::Range(0, 10000000));
  app->add_option("--seed", opt->seed, "sampling seed");
  app->add_option("--device", opt->device, "where the model runs: cpu, cuda or cuda:N")
      ->check([](const std::string& s) {
        try {
          Device::parse(s);
          return std::string();
        } catch (const Error&) {
          return "expected cpu, cuda or cuda:N, not '" + s + "'";
        }
      });
  return {app, [opt] {
            train::TextGenerator g = train::load_generator(opt->checkpoint, Device::parse(opt->device));
            std::printf("%s", opt->prompt.c_str());
            std::fflush(stdout);
            g.generate(opt->prompt,
                       {.max_new_tokens = opt->max_new_tokens, .temperature = opt->temperature, .top_k = opt->top_k,
                        .seed = opt->seed},
                       [](std::string_view piece) {
                         std::fwrite(piece.data(), 1, piece.size(), stdout);
                         std::fflush(stdout);
                       });
            std::printf("\n");
            return kExitOk;
          }};
}

}  // namespace trireme::cli
