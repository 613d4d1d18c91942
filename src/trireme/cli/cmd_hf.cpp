// `trireme import hf DIR -o OUT` and `trireme export hf CHECKPOINT -o DIR`: Hugging Face model
// folders in and out (train/hf_checkpoint.h, docs/HUGGINGFACE.md).
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/train/hf_checkpoint.h"

namespace trireme::cli {

namespace {

struct Options {
  std::string format, source, out;
  train::ExportOptions export_options;
};

CLI::App* add_format_and_paths(CLI::App* app, Options& o, const char* source_help, const char* out_help) {
  app->add_option("format", o.format, "the other side's format: hf (Hugging Face transformers)")
      ->required()
      ->check(CLI::IsMember({"hf"}));
  app->add_option("source", o.source, source_help)->required()->check(CLI::ExistingDirectory);
  app->add_option("-o,--out", o.out, out_help)->required();
  return app;
}

// Input that cannot be converted is a usage error (exit 2) with one line saying why.
template <class F>
int run_refusing(const char* name, F&& f) {
  try {
    f();
  } catch (const io::ConfigError& e) {
    std::fprintf(stderr, "trireme %s: error: %s\n", name, e.what());
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace

Command add_import_command(CLI::App& root) {
  auto o = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("import", "Convert a Hugging Face model folder into a trireme checkpoint");
  add_format_and_paths(app, *o,
                       "the model folder: config.json, model.safetensors (or its sharded index), tokenizer.json",
                       "a new folder for the trireme checkpoint (use it as --checkpoint of generate)");
  return {app, [o] {
            return run_refusing("import", [&] {
              const auto dir = train::import_hf(o->source, o->out);
              std::printf("imported %s -> %s\n", o->source.c_str(), dir.string().c_str());
            });
          }};
}

Command add_export_command(CLI::App& root) {
  auto o = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("export", "Write a trireme checkpoint as a Hugging Face model folder");
  add_format_and_paths(app, *o, "a checkpoint folder, or a training run's out_dir (its latest checkpoint)",
                       "a new folder: config.json, model.safetensors and, for a Hugging Face tokenizer, tokenizer.json");
  app->add_flag("--merge", o->export_options.merge,
                "fold LoRA adapters into the weights (a LoRA run's checkpoint needs it; docs/FINETUNING.md)");
  app->add_option("--adapters", o->export_options.adapters,
                  "with --merge: an adapters.safetensors to fold into the checkpoint's weights (its base model)")
      ->check(CLI::ExistingFile);
  return {app, [o] {
            return run_refusing("export", [&] {
              const bool wrote_tokenizer = train::export_hf(o->source, o->out, o->export_options);
              std::printf("exported %s -> %s\n", o->source.c_str(), o->out.c_str());
              if (!wrote_tokenizer)
                std::printf("note: no tokenizer.json written: the checkpoint's tokenizer is trireme's own (char or bpe), "
                            "which has no Hugging Face form yet\n");
            });
          }};
}

}  // namespace trireme::cli
