// The trireme command line: parses the subcommand, runs it, and turns every error into one
// clear line on stderr and a non-zero exit status (2 for usage and configuration errors).
#include <cstdio>
#include <exception>
#include <vector>

#include "trireme/cli/commands.h"
#include "trireme/core/error.h"
#include "trireme/runtime/cpu_setup.h"

int main(int argc, char** argv) {
  // First: it may re-execute the program with the BLAS kernels and OpenMP waiting set for this CPU.
  trireme::runtime::configure_cpu_runtime(argv);
  using namespace trireme::cli;
  CLI::App app{"trireme: train large neural networks across many devices", "trireme"};
  app.set_version_flag("--version", std::string("trireme ") + TRIREME_VERSION);
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });

  std::vector<Command> commands = {add_train_command(app),    add_generate_command(app), add_prepare_command(app),
                                   add_launch_command(app),   add_plot_command(app),     add_env_command(app),
                                   add_eval_command(app),     add_estimate_command(app),
                                   add_plan_command(app),     add_import_command(app),   add_export_command(app),
                                   add_graph_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trireme: error: %s (see trireme --help)\n", e.what());
    return kExitUsage;
  }
  for (Command& c : commands) {
    if (!c.app->parsed()) continue;
    try {
      return c.run();
    } catch (const trireme::Error& e) {
      std::fprintf(stderr, "trireme %s: error: %s\n", c.app->get_name().c_str(), e.what());
      return kExitFailure;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trireme %s: error: %s\n", c.app->get_name().c_str(), e.what());
      return kExitFailure;
    }
  }
  return kExitUsage;
}
