// `trireme plot METRICS_FILE [-o OUT.svg]`: the loss curve of a run.
#include <memory>

#include "trireme/cli/commands.h"
#include "trireme/train/plot.h"

namespace trireme::cli {

Command add_plot_command(CLI::App& root) {
  struct Options {
    std::string metrics, output;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* app = root.add_subcommand("plot", "Plot a run's loss curve (SVG) from its metrics.jsonl");
  app->add_option("metrics", opt->metrics, "metrics file written by trireme train")->required()->check(CLI::ExistingFile);
  app->add_option("-o,--output", opt->output, "SVG to write (default: next to the metrics, loss.svg)");
  return {app, [opt] {
            std::string out = opt->output;
            if (out.empty()) {
              auto slash = opt->metrics.find_last_of('/');
              out = (slash == std::string::npos ? std::string() : opt->metrics.substr(0, slash + 1)) + "loss.svg";
            }
            train::plot_metrics_file(opt->metrics, out);
            std::printf("wrote %s\n", out.c_str());
            return kExitOk;
          }};
}

}  // namespace trireme::cli
