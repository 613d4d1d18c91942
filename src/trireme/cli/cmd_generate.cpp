// `trireme generate` (being wired up).
#include "trireme/cli/commands.h"
#include "trireme/core/error.h"

namespace trireme::cli {
Command add_generate_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("generate", "generate");
  return {app, [] { TRIREME_FAIL("generate is not wired up yet"); return kExitFailure; }};
}
}  // namespace trireme::cli
