// `trireme train` (being wired up).
#include "trireme/cli/commands.h"
#include "trireme/core/error.h"

namespace trireme::cli {
Command add_train_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("train", "train");
  return {app, [] { TRIREME_FAIL("train is not wired up yet"); return kExitFailure; }};
}
}  // namespace trireme::cli
