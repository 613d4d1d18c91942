// Calibration profiles: saved and read back, applied to this machine, refused from another
// machine or device kind; a GPU profile applied to the GPUs' cluster; a block's time taken apart
// from the model's runs.
#include <gtest/gtest.h>

#include <filesystem>

#include "expect_error.h"
#include "trireme/io/config.h"
#include "trireme/io/file_write.h"
#include "trireme/plan/calibrate.h"
#include "trireme/plan/cluster.h"

namespace trireme::plan {
namespace {

namespace fs = std::filesystem;

MachineProfile sample() {
  MachineProfile p;
  p.fingerprint = machine_fingerprint();
  p.cores = 4;
  p.processes = 2;
  p.gemm_gflops = 50;
  p.memory_gbs = 8;
  p.link = {1.5, 40};
  p.collectives = {{"all_reduce", 4096, 1e-4}, {"send_recv", 4096, 5e-5}};
  return p;
}

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("trireme_profile_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

TEST(Profile, SavedAndReadBack) {
  const fs::path path = temp_file("p.json");
  save_profile(path.string(), sample());
  const auto p = load_profile(path.string(), true);
  ASSERT_TRUE(p.has_value());
  EXPECT_DOUBLE_EQ(p->gemm_gflops, 50);
  EXPECT_DOUBLE_EQ(p->link.latency_us, 40);
  ASSERT_EQ(p->collectives.size(), 2u);
  EXPECT_EQ(p->collectives[1].op, "send_recv");
  // Applied for 4 processes: each has half the cores the 2 calibrated processes had.
  ClusterSpec c = this_machine_cluster(4);
  apply_profile(c, *p, 4);
  EXPECT_DOUBLE_EQ(c.device.tflops_f32, 0.025);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_gbs, 1.5);
  EXPECT_NE(c.source.find("calibrated"), std::string::npos);
}

TEST(Profile, FromAnotherMachineIsRefusedWithTheReason) {
  const fs::path path = temp_file("other.json");
  MachineProfile p = sample();
  p.fingerprint = "cpu=Some Other CPU; cores=96";
  save_profile(path.string(), p);
  EXPECT_THROW(load_profile(path.string(), false), io::ConfigError);
  testing::expect_error([&] { load_profile(path.string(), false); },
                        {"another machine", "Some Other CPU", "trireme plan --calibrate"});
}

TEST(Profile, MissingOrBrokenProfiles) {
  EXPECT_FALSE(load_profile("/nonexistent/p.json", false).has_value());
  EXPECT_THROW(load_profile("/nonexistent/p.json", true), io::ConfigError);
  const fs::path path = temp_file("broken.json");
  io::write_file(path, "{\"fingerprint\": 3}");
  testing::expect_error([&] { load_profile(path.string(), false); }, "is not a calibration profile");
}

TEST(Profile, OfGpusIsReadBackAndSetsTheMeasuredDtypesRate) {
  MachineProfile p = sample();
  p.device = "cuda";
  p.dtype = "bf16";
  p.fingerprint = machine_fingerprint("cuda");
  p.processes = 2;
  p.gemm_gflops = 600'000;  // 600 TFLOP/s
  p.memory_gbs = 4'000;
  p.model_rates = {{"none", 16384, 400e12, 40e12, 0.2e-3, 0.6e-3, 0.3e-3, 0.9e-3}, {"full", 16384, 300e12, 40e12}};
  p.step_fixed_s = 1e-3;
  p.optimizer_s_per_parameter = 1e-11;
  p.link = {180, 12};
  const fs::path path = temp_file("gpu.json");
  save_profile(path.string(), p);
  const auto q = load_profile(path.string(), true, "cuda");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->device, "cuda");
  EXPECT_EQ(q->dtype, "bf16");
  ClusterSpec c = cluster_preset("h200-nvlink");
  const double f32 = c.device.tflops_f32;
  apply_profile(c, *q, 4);  // a GPU per process: not shared, whatever their number
  EXPECT_DOUBLE_EQ(c.device.tflops_bf16, 600);
  EXPECT_DOUBLE_EQ(c.device.tflops_f16, 600);
  EXPECT_DOUBLE_EQ(c.device.tflops_f32, f32);  // not measured: the preset's
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth_gbs, 4'000);
  ASSERT_EQ(c.device.achieved.size(), 2u);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("full", 16384)->block_flops, 300e12);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("none", 16384)->head_flops, 40e12);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("none", 16384)->block_later_s, 0.2e-3);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("none", 16384)->head_later_s, 0.6e-3);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("none", 16384)->block_host_s, 0.3e-3);
  EXPECT_DOUBLE_EQ(c.device.achieved_at("none", 16384)->head_host_s, 0.9e-3);
  EXPECT_FALSE(c.device.achieved_at("selective", 16384).has_value());
  EXPECT_DOUBLE_EQ(c.device.step_fixed_s, 1e-3);
  EXPECT_DOUBLE_EQ(c.device.optimizer_s_per_parameter, 1e-11);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_gbs, 180);
  EXPECT_NE(c.source.find("GPUs"), std::string::npos);
  // One GPU measures no collectives and no link: the preset's link stays.
  MachineProfile alone = *q;
  alone.processes = 1;
  alone.collectives.clear();
  alone.link = {};
  save_profile(path.string(), alone);
  const auto read = load_profile(path.string(), true, "cuda");
  ASSERT_TRUE(read.has_value());
  ClusterSpec one = cluster_preset("h200-nvlink");
  const LinkSpec link = one.intra_node;
  apply_profile(one, *read, 1);
  EXPECT_DOUBLE_EQ(one.intra_node.bandwidth_gbs, link.bandwidth_gbs);
}

TEST(Profile, OfAnotherDeviceKindIsRefused) {
  const fs::path path = temp_file("cpu_for_gpu.json");
  save_profile(path.string(), sample());
  testing::expect_error([&] { load_profile(path.string(), false, "cuda"); },
                        {"train.device = \"cpu\"", "\"cuda\"", "trireme plan --calibrate"});
}

TEST(Profile, DefaultPathFollowsTheCacheDirectory) {
  ::setenv("TRIREME_CACHE_DIR", "/tmp/somewhere", 1);
  EXPECT_EQ(default_profile_path(), "/tmp/somewhere/plan_profile.json");
  EXPECT_EQ(default_profile_path("cuda"), "/tmp/somewhere/plan_profile_cuda.json");
  ::unsetenv("TRIREME_CACHE_DIR");
  EXPECT_NE(default_profile_path().find("trireme/plan_profile.json"), std::string::npos);
}

TEST(Profile, ABlockWithoutRecomputationIsHalfTheDifferenceOfOneAndThreeBlocks) {
  const ModelSplit s = split_model_runs(5.0, 9.0);  // rest 3, block 2
  EXPECT_DOUBLE_EQ(s.block_s, 2.0);
  EXPECT_DOUBLE_EQ(s.rest_s, 3.0);
}

TEST(Profile, UnderRecomputationTheRestIsTheOneMeasuredWithout) {
  // Exact runs: rest 3, block 2.5 under recomputation.
  ModelSplit s = split_model_runs(5.5, 10.5, 3.0);
  EXPECT_DOUBLE_EQ(s.block_s, 2.5);
  EXPECT_DOUBLE_EQ(s.rest_s, 3.0);
  // Runs of a small micro-batch whose three blocks took hardly longer than one (noise): their own
  // difference would make the rest larger than the whole one-block run and leave ~0.1 for a block;
  // with the rest known, a block is what the runs hold beyond it.
  const ModelSplit noisy = split_model_runs(5.5, 5.7);
  EXPECT_LT(noisy.block_s, 0.2);
  s = split_model_runs(5.5, 5.7, 3.0);
  EXPECT_NEAR(s.block_s, (2.5 + 3 * 2.7) / 10, 1e-12);
  EXPECT_GT(s.block_s, 1.0);
  // Three blocks measured faster than one: no negative block either way it is fitted.
  EXPECT_LT(split_model_runs(5.5, 5.0).block_s, 0);
  EXPECT_GT(split_model_runs(5.5, 5.0, 3.0).block_s, 0);
}

}  // namespace
}  // namespace trireme::plan
