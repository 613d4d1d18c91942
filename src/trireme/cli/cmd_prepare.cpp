// `trireme prepare` (being wired up).
#include "trireme/cli/commands.h"
#include "trireme/core/error.h"

namespace trireme::cli {
Command add_prepare_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("prepare", "prepare");
  return {app, [] { TRIREME_FAIL("prepare is not wired up yet"); return kExitFailure; }};
}
}  // namespace trireme::cli
