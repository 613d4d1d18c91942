// train.device for the trainer: a GPU the machine cannot give is a ConfigError that says why
// (checked where there is no usable GPU, like the dev machine), and a parallel run must say
// "cuda" (each rank takes cuda:LOCAL_RANK). The CUDA runs themselves are in tests/cuda/trainer_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "trireme/cuda/device.h"
#include "trireme/io/config.h"
#include "trireme/train/trainer.h"

using namespace trireme;
namespace fs = std::filesystem;

namespace {

io::Config device_config(const std::string& device, std::vector<std::string> extra = {}) {
  extra.push_back("train.device=" + device);
  extra.push_back("train.out_dir=" + (fs::temp_directory_path() / "trireme_trainer_device_unused").string());
  return io::Config::parse("[model]\nd_model = 32\nn_layer = 2\nn_head = 2\nblock_size = 16\n", "test", extra);
}

// The message of the ConfigError the Trainer throws for `config` ("" when none).
std::string config_error(const io::Config& config) {
  try {
    train::Trainer t(config, {.quiet = true});
  } catch (const io::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TrainerDevice, CudaWithoutAGpuSaysWhy) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is usable here; tests/cuda trains on it";
  for (const char* device : {"cuda", "cuda:1"}) {
    const std::string msg = config_error(device_config(device));
    EXPECT_NE(msg.find(std::string("train.device = \"") + device + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("no GPU can be used: " + cuda::unavailable_reason()), std::string::npos) << msg;
    EXPECT_NE(msg.find("train.device = \"cpu\""), std::string::npos) << msg;  // what to do instead
  }
  // The out_dir is not created for a run that cannot start.
  EXPECT_FALSE(fs::exists(fs::temp_directory_path() / "trireme_trainer_device_unused"));
}

TEST(TrainerDevice, PipelineOnGpuMeetsOnlyTheUsualChecks) {
  // Pipelines run on GPUs (tests/cuda/parallel_trainer_test.cpp): no refusal of their own.
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is usable here; tests/cuda trains a pipeline on two";
  const std::string msg = config_error(device_config("cuda", {"parallel.pp=2"}));
  EXPECT_NE(msg.find("no GPU can be used"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("pipeline"), std::string::npos) << msg;
}

TEST(TrainerDevice, ParallelRunsTakeCudaNotOneIndex) {
  const std::string msg = config_error(device_config("cuda:1", {"parallel.dp=2"}));
  EXPECT_NE(msg.find("cuda:LOCAL_RANK"), std::string::npos) << msg;
}

TEST(TrainerDevice, UnknownDeviceIsAConfigError) {
  EXPECT_THROW(device_config("tpu"), io::ConfigError);
}
