// `trireme launch [options] -- PROGRAM ARGS`: start N workers per node with torchrun-style
// environment variables; see dist/launcher.h. Its flags are parsed by the launcher itself so
// that everything after `--` reaches the program untouched.
#include <cstdio>
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/core/error.h"
#include "trireme/dist/launcher.h"

namespace trireme::cli {

Command add_launch_command(CLI::App& root) {
  CLI::App* app = root.add_subcommand("launch", "Run a program on N processes per node (like torchrun)");
  app->prefix_command();  // hand every remaining argument to the launcher's own parser
  app->set_help_flag();   // its --help is the launcher's usage
  return {app, [app] {
            std::vector<std::string> rest = app->remaining();
            for (const std::string& a : rest) {
              if (a == "--") break;
              if (a == "-h" || a == "--help") {
                std::fputs(dist::launch_usage(), stdout);
                return kExitOk;
              }
            }
            dist::LaunchOptions opts;
            try {
              opts = dist::launch_parse_args(rest);
            } catch (const Error& e) {
              std::fprintf(stderr, "trireme launch: error: %s\n", e.what());
              return kExitUsage;
            }
            return dist::launch_main(opts);
          }};
}

}  // namespace trireme::cli
