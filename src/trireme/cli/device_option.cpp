// The --device and --no-memory-check options of the commands that run a trained model (see commands.h).
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

void add_memory_check_flag(CLI::App* app, bool& no_memory_check) {
  app->add_flag("--no-memory-check", no_memory_check,
                "load the model even when its memory estimate exceeds what the device has free");
}

}  // namespace trireme::cli
