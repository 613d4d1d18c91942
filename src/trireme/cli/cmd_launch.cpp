// `trireme launch` (being wired up).
#include "trireme/cli/commands.h"
#include "trireme/core/error.h"

namespace trireme::cli {
Command add_launch_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("launch", "launch");
  return {app, [] { TRIREME_FAIL("launch is not wired up yet"); return kExitFailure; }};
}
}  // namespace trireme::cli
