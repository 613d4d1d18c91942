// One parallel layout trained for 20 steps eagerly and in train.mode = "static" (`trireme train
// --nproc N` over Gloo, dropout and clipping on): the two runs must agree bit for bit in every
// step's loss and gradient norm and in the final model and every rank's optimizer file; and the
// same with the run interrupted after 10 steps and resumed in the other mode.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "tiny_trainer_config.h"

namespace trireme::testing {

struct StaticLayout {
  const char* name;
  int nproc;
  const char* set;  // the layout's --set flags, applied after the common ones
};

inline std::string static_layout_train_command(const StaticLayout& l, const std::string& mode, const std::string& out) {
  return "train --nproc " + std::to_string(l.nproc) + " --config " + std::string(TRIREME_SOURCE_DIR) +
         "/configs/tang_poems.toml "
         "--set model.d_model=32 --set model.n_layer=2 --set model.n_head=2 --set model.block_size=16 "
         "--set train.batch_size=8 --set train.steps=20 --set schedule.warmup_steps=2 --set train.eval_interval=10 "
         "--set model.dropout=0.1 --set optim.grad_clip=0.5 --set train.threads=1 --set train.checkpoint_interval=20 "
         "--set train.mode=" + mode + " --set train.out_dir=" + out + " " + l.set;
}

inline std::string static_layout_file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<nlohmann::json> static_layout_metrics(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Trains `l` both ways and compares; `expect_in_log`: a line the static run must print.
inline void expect_static_equals_eager(const StaticLayout& l, const std::string& expect_in_log = "mode: static") {
  namespace fs = std::filesystem;
  using trireme::cli_testing::run;
  const std::string e = fresh_run_dir(std::string("trireme_static_eager_") + l.name);
  const std::string s = fresh_run_dir(std::string("trireme_static_static_") + l.name);
  auto re = run(static_layout_train_command(l, "eager", e));
  ASSERT_EQ(re.status, 0) << re.out;
  auto rs = run(static_layout_train_command(l, "static", s));
  ASSERT_EQ(rs.status, 0) << rs.out;
  EXPECT_NE(rs.out.find(expect_in_log), std::string::npos) << rs.out;
  const auto me = static_layout_metrics(fs::path(e) / "metrics.jsonl"), ms = static_layout_metrics(fs::path(s) / "metrics.jsonl");
  ASSERT_EQ(me.size(), 20u);
  ASSERT_EQ(ms.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(ms[i]["loss"].get<double>(), me[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ms[i]["grad_norm"], me[i]["grad_norm"]) << "step " << i + 1;  // null: f16 skipped it
    for (const char* f16 : {"loss_scale", "skipped_steps"})
      EXPECT_EQ(ms[i].value(f16, nlohmann::json()), me[i].value(f16, nlohmann::json())) << "step " << i + 1;
    EXPECT_EQ(ms[i].value("graph_traces", int64_t(-1)), i == 0 ? 0 : 1) << "step " << i + 1;
  }
  std::vector<std::string> files = {"model.safetensors"};
  for (int r = 0; r < l.nproc; ++r) files.push_back("optimizer.rank" + std::to_string(r) + ".safetensors");
  for (const std::string& f : files) {
    const fs::path a = fs::path(e) / "checkpoints" / "step_00000020" / f, b = fs::path(s) / "checkpoints" / "step_00000020" / f;
    ASSERT_TRUE(fs::exists(a) && fs::exists(b)) << f;
    EXPECT_TRUE(static_layout_file_bytes(a) == static_layout_file_bytes(b)) << f;
  }
  fs::remove_all(e);
  fs::remove_all(s);
}

// Trains `l` for 20 steps eagerly, and twice for 10 steps in one mode resumed for 10 in the other
// (train.steps 10, then 20 with --resume: `l` must make the schedule independent of train.steps);
// every step's loss and gradient norm and the final model must be the uninterrupted run's.
inline void expect_resume_across_modes_equals_eager(const StaticLayout& l) {
  namespace fs = std::filesystem;
  using trireme::cli_testing::run;
  const std::string whole = fresh_run_dir(std::string("trireme_static_resume_whole_") + l.name);
  auto re = run(static_layout_train_command(l, "eager", whole));
  ASSERT_EQ(re.status, 0) << re.out;
  const auto want = static_layout_metrics(fs::path(whole) / "metrics.jsonl");
  ASSERT_EQ(want.size(), 20u);
  const fs::path last = fs::path("checkpoints") / "step_00000020" / "model.safetensors";
  const std::string model = static_layout_file_bytes(fs::path(whole) / last);
  for (const auto& [first, second] : {std::pair{"eager", "static"}, std::pair{"static", "eager"}}) {
    const std::string d = fresh_run_dir(std::string("trireme_static_resume_") + first + "_" + l.name);
    auto ra = run(static_layout_train_command(l, first, d) +
                  " --set train.steps=10 --set train.checkpoint_interval=10");
    ASSERT_EQ(ra.status, 0) << ra.out;
    auto rb = run(static_layout_train_command(l, second, d) + " --resume");
    ASSERT_EQ(rb.status, 0) << rb.out;
    const auto got = static_layout_metrics(fs::path(d) / "metrics.jsonl");
    ASSERT_EQ(got.size(), 20u) << first << " then " << second;
    for (size_t i = 0; i < 20; ++i) {
      EXPECT_EQ(got[i]["loss"], want[i]["loss"]) << first << " then " << second << ", step " << i + 1;
      EXPECT_EQ(got[i]["grad_norm"], want[i]["grad_norm"]) << first << " then " << second << ", step " << i + 1;
    }
    EXPECT_TRUE(static_layout_file_bytes(fs::path(d) / last) == model) << first << " then " << second;
    fs::remove_all(d);
  }
  fs::remove_all(whole);
}

}  // namespace trireme::testing
