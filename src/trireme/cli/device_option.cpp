// The --device option of the commands that run a trained model (see commands.h).
#include "trireme/cli/commands.h"
#include "trireme/core/device.h"
#include "trireme/core/error.h"

namespace trireme::cli {

void add_device_option(CLI::App* app, std::string& device) {
  app->add_option("--device", device, "where the model runs: cpu, cuda or cuda:N")
      ->capture_default_str()
      ->check([](const std::string& s) {
        try {
          Device::parse(s);
          return std::string();
        } catch (const Error&) {
          return "expected cpu, cuda or cuda:N, not '" + s + "'";
        }
      });
}

}  // namespace trireme::cli
