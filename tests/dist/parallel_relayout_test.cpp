// Resuming in another parallel layout (Note [resuming in another layout]): a run trained 6 steps
// in one layout and resumed in another logs, for steps 7-12, the losses and the final validation
// loss of a run trained in the new layout from the start (1e-4 relative, the equivalence suite's
// tolerance), for dp=2 -> one process (with dropout: the RNG carries over), one process -> tp=2,
// pp=2 -> dp=2 with ZeRO-1 (the stages' files reassembled, then sharded over dp), ZeRO-1 on ->
// off, and dp=2 x tp=2 with ZeRO-1 -> pp=2 (ZeRO-1 ranges of tp shards, the padded vocabulary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "parallel_cli.h"

namespace fs = std::filesystem;
using namespace trireme;
using namespace trireme::parallel::testing;

namespace {

class ParallelRelayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("trireme_relayout_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.toml") << kConfig;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static Result train(const std::string& name, const std::string& extra) {
    const fs::path dir = root_ / name;
    // The data are prepared by the first run and copied into the others' folders.
    if (!fs::exists(dir / "data") && fs::exists(root_ / "prepared" / "data")) {
      fs::create_directories(dir);
      fs::copy(root_ / "prepared" / "data", dir / "data", fs::copy_options::recursive);
    }
    Result r = run_cli("train -c " + (root_ / "tiny.toml").string() + " --set train.out_dir=" + dir.string() + " " + extra);
    if (r.status == 0 && !fs::exists(root_ / "prepared")) {
      fs::create_directories(root_ / "prepared");
      fs::copy(dir / "data", root_ / "prepared" / "data", fs::copy_options::recursive);
    }
    return r;
  }

  // Trains 6 steps with `from`, resumes to 12 with `to`, and compares steps 7-12 with 12 steps
  // trained with `to` throughout.
  static void expect_resume_matches(const std::string& name, const std::string& from, const std::string& to) {
    Result first = train(name, from + " --set train.steps=6");
    ASSERT_EQ(first.status, 0) << first.output;
    Result rest = train(name, to + " --resume");
    ASSERT_EQ(rest.status, 0) << rest.output;
    EXPECT_NE(rest.output.find("optimizer state is re-cut"), std::string::npos) << rest.output;
    Result straight = train(name + "_straight", to);
    ASSERT_EQ(straight.status, 0) << straight.output;
    const std::vector<Step> got = read_metrics(root_ / name), want = read_metrics(root_ / (name + "_straight"));
    ASSERT_EQ(got.size(), 12u) << rest.output;
    ASSERT_EQ(want.size(), 12u) << straight.output;
    double worst = 0;
    for (size_t i = 6; i < 12; ++i) {
      const double rel = std::abs(got[i].loss - want[i].loss) / want[i].loss;
      worst = std::max(worst, rel);
      EXPECT_LT(rel, 1e-4) << name << " step " << i + 1 << ": " << got[i].loss << " vs " << want[i].loss;
    }
    ASSERT_FALSE(std::isnan(want[11].val_loss));
    EXPECT_LT(std::abs(got[11].val_loss - want[11].val_loss) / want[11].val_loss, 1e-4) << name;
    std::printf("[ %s ] steps 7-12 after the switch: worst relative loss diff %.1e\n", name.c_str(), worst);
  }

  static fs::path root_;
};

fs::path ParallelRelayout::root_;

}  // namespace

TEST_F(ParallelRelayout, DataParallelToOneProcessWithDropout) {
  const std::string dropout = " --set model.dropout=0.1";
  expect_resume_matches("dp2_to_one", "--nproc 2 --set parallel.dp=2" + dropout, dropout);
}

TEST_F(ParallelRelayout, OneProcessToTensorParallel) {
  expect_resume_matches("one_to_tp2", "", "--nproc 2 --set parallel.tp=2");
}

TEST_F(ParallelRelayout, PipelineToDataParallelWithZero) {
  expect_resume_matches("pp2_to_dp2_zero", "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2",
                        "--nproc 2 --set parallel.dp=2 --set parallel.zero=true --set parallel.bucket_mb=0.05");
}

TEST_F(ParallelRelayout, ZeroOnToOff) {
  expect_resume_matches("dp2_zero_to_dp2",
                        "--nproc 2 --set parallel.dp=2 --set parallel.zero=true --set parallel.bucket_mb=0.05",
                        "--nproc 2 --set parallel.dp=2");
}

TEST_F(ParallelRelayout, TensorParallelZeroToPipeline) {
  expect_resume_matches("dp2_tp2_zero_to_pp2",
                        "--nproc 4 --set parallel.dp=2 --set parallel.tp=2 --set parallel.zero=true "
                        "--set parallel.bucket_mb=0.05",
                        "--nproc 2 --set parallel.pp=2 --set parallel.micro_batches=2");
}

// ZeRO cuts its shards along the data-parallel buckets, so another bucket size is another layout
// of the optimizer state even with the same dp, tp and pp.
TEST_F(ParallelRelayout, ZeroWithAnotherBucketSize) {
  expect_resume_matches("dp2_zero_buckets",
                        "--nproc 2 --set parallel.dp=2 --set parallel.zero=true --set parallel.bucket_mb=0.05",
                        "--nproc 2 --set parallel.dp=2 --set parallel.zero=true --set parallel.bucket_mb=0.2");
}
