// train.mode = "static" with data and tensor parallelism and ZeRO-1/2 over Gloo (`trireme train
// --nproc N`): each rank traces its step with its collectives as nodes (the reducer's all-reduces or
// reduce-scatters, the tensor-parallel mappings, ZeRO's all-gathers, the gradient norm's sums) and
// replays it; the run is the eager run of the
// same layout bit for bit (metrics, model and every rank's optimizer file), dropout and clipping on.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "tiny_trainer_config.h"

namespace fs = std::filesystem;
using trireme::cli_testing::run;

namespace {

struct Layout {
  const char* name;
  int nproc;
  const char* set;
};

std::string train(const Layout& l, const std::string& mode, const std::string& out) {
  return "train --nproc " + std::to_string(l.nproc) + " " + l.set + " --config " + std::string(TRIREME_SOURCE_DIR) + "/configs/tang_poems.toml " +
         "--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.block_size=16 "
         "--set train.batch_size=8 --set train.steps=20 --set schedule.warmup_steps=2 --set train.eval_interval=10 "
         "--set model.dropout=0.1 --set optim.grad_clip=0.5 --set train.threads=1 --set train.checkpoint_interval=20 "
         "--set train.mode=" + mode + " --set train.out_dir=" + out;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> metrics(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

class StaticParallel : public ::testing::TestWithParam<Layout> {};

TEST_P(StaticParallel, TwentyStepsEqualEagerBitForBit) {
  const Layout& l = GetParam();
  const std::string e = trireme::testing::fresh_run_dir(std::string("trireme_static_eager_") + l.name);
  const std::string s = trireme::testing::fresh_run_dir(std::string("trireme_static_static_") + l.name);
  auto re = run(train(l, "eager", e));
  ASSERT_EQ(re.status, 0) << re.out;
  auto rs = run(train(l, "static", s));
  ASSERT_EQ(rs.status, 0) << rs.out;
  EXPECT_NE(rs.out.find("mode: static"), std::string::npos) << rs.out;
  const auto me = metrics(fs::path(e) / "metrics.jsonl"), ms = metrics(fs::path(s) / "metrics.jsonl");
  ASSERT_EQ(me.size(), 20u);
  ASSERT_EQ(ms.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(ms[i]["loss"].get<double>(), me[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ms[i]["grad_norm"].get<double>(), me[i]["grad_norm"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ms[i].value("graph_traces", int64_t(-1)), i == 0 ? 0 : 1) << "step " << i + 1;
  }
  std::vector<std::string> files = {"model.safetensors"};
  for (int r = 0; r < l.nproc; ++r) files.push_back("optimizer.rank" + std::to_string(r) + ".safetensors");
  for (const std::string& f : files) {
    const fs::path a = fs::path(e) / "checkpoints" / "step_00000020" / f, b = fs::path(s) / "checkpoints" / "step_00000020" / f;
    ASSERT_TRUE(fs::exists(a) && fs::exists(b)) << f;
    EXPECT_TRUE(file_bytes(a) == file_bytes(b)) << f;
  }
  fs::remove_all(e);
  fs::remove_all(s);
}

INSTANTIATE_TEST_SUITE_P(Layouts, StaticParallel,
                         ::testing::Values(Layout{"dp2", 2, "--set parallel.dp=2"}, Layout{"tp2", 2, "--set parallel.tp=2"},
                                           Layout{"dp2_tp2", 4, "--set parallel.dp=2 --set parallel.tp=2"},
                                           Layout{"dp2_zero1", 2, "--set parallel.dp=2 --set parallel.zero=1"},
                                           // small buckets: several in flight, settled as they finish
                                           Layout{"dp2_zero2", 2, "--set parallel.dp=2 --set parallel.zero=2 --set parallel.bucket_mb=0.05"}),
                         [](const auto& info) { return std::string(info.param.name); });
