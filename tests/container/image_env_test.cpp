// Inside a trireme container image (TRIREME_IMAGE, set by container/Containerfile.*): `trireme
// env` names the image, and a CPU image asked for a GPU says to run the GPU image instead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli/run_command.h"

namespace {

using trireme::cli_testing::Result;
using trireme::cli_testing::run_command;

Result trireme_in(const std::string& image, const std::string& args) {
  const std::string env = image.empty() ? "env -u TRIREME_IMAGE " : "env TRIREME_IMAGE=" + image + " ";
  return run_command(env + "timeout 120 " + TRIREME_BINARY + " " + args);
}

std::string fresh_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

}  // namespace

TEST(ContainerImage, EnvNamesTheImage) {
  Result r = trireme_in("trireme:9.8.7-cpu-debian12", "env --json");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"image\": \"trireme:9.8.7-cpu-debian12\""), std::string::npos) << r.out;

  r = trireme_in("trireme:9.8.7-cpu-debian12", "env");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\nimage "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trireme:9.8.7-cpu-debian12\n"), std::string::npos) << r.out;
}

TEST(ContainerImage, EnvOutsideAnImageSaysNone) {
  const Result r = trireme_in("", "env --json");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"image\": \"none (not in a trireme container image)\""), std::string::npos) << r.out;
}

// The CPU image (built without CUDA) asked for a GPU: the refusal names the image and the GPU
// image to run instead, before any work.
TEST(ContainerImage, CpuImageAskedForAGpuNamesTheGpuImage) {
#ifdef TRIREME_WITH_CUDA
  GTEST_SKIP() << "a CUDA build: its reason for no GPU is the driver's, not the image's";
#else
  const std::string image = "trireme:" TRIREME_VERSION "-cpu-debian12";
  const std::string says = "this container image, " + image + ", has no GPU support; run trireme's GPU image instead (trireme:" TRIREME_VERSION "-gpu-cuda";
  const std::string out_dir = fresh_dir("container_gpu_refusal");
  Result r = trireme_in(image, "train --set train.device=cuda --set train.out_dir=" + out_dir);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("train.device = \"cuda\", but no GPU can be used: " + says), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out_dir));

  r = trireme_in(image, "generate --checkpoint " + std::filesystem::temp_directory_path().string() +
                            " --prompt x --device cuda");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(says), std::string::npos) << r.out;

  // Outside an image the reason stays the build's.
  r = trireme_in("", "train --set train.device=cuda --set train.out_dir=" + out_dir);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("no GPU can be used: trireme was built without CUDA"), std::string::npos) << r.out;
#endif
}
