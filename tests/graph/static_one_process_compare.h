// The tiny trainer config trained for `steps` steps eagerly and in train.mode = "static" in one
// process, with dropout 0.1 and the `common` settings: the two runs must agree bit for bit in
// every step's loss and gradient norm, the validation loss, and the final model and optimizer
// files; the static run traces once (graph_traces 0 on its eager first step, then 1).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "graph_test_util.h"
#include "tiny_trainer_config.h"
#include "trireme/io/safetensors.h"
#include "trireme/train/metrics.h"
#include "trireme/train/trainer.h"

namespace trireme::testing {

inline void expect_same_tensor_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  io::SafetensorsFile fa = io::load_safetensors(a.string()), fb = io::load_safetensors(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a;
  ASSERT_GT(fa.tensors.size(), 0u) << a;
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.tensors.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(t, fb.tensors.at(name))) << a.filename() << ": " << name;
  }
}

// Returns the eager run's metrics (for checks of what the settings did, e.g. that clipping acted).
inline std::vector<nlohmann::json> expect_static_equals_eager(const std::string& name, const std::vector<std::string>& common,
                                                              int64_t steps = 20) {
  const std::string e = fresh_run_dir("trireme_static_" + name + "_eager");
  const std::string s = fresh_run_dir("trireme_static_" + name + "_static");
  std::vector<std::string> static_set = common;
  static_set.push_back("train.mode=static");
  train::TrainSummary eager = train::Trainer(tiny_trainer_config(e, steps, 0.1, common), {.quiet = true}).run();
  train::TrainSummary stat = train::Trainer(tiny_trainer_config(s, steps, 0.1, static_set), {.quiet = true}).run();
  EXPECT_EQ(eager.losses.size(), size_t(steps));
  EXPECT_EQ(stat.losses.size(), size_t(steps));
  for (size_t i = 0; i < eager.losses.size() && i < stat.losses.size(); ++i)
    EXPECT_EQ(stat.losses[i], eager.losses[i]) << name << " step " << i + 1;
  EXPECT_EQ(stat.final_val_loss, eager.final_val_loss) << name;
  std::vector<nlohmann::json> me = train::read_metrics(eager.metrics_path), ms = train::read_metrics(stat.metrics_path);
  EXPECT_EQ(me.size(), ms.size());
  for (size_t i = 0; i < me.size() && i < ms.size(); ++i) {
    EXPECT_EQ(ms[i]["grad_norm"], me[i]["grad_norm"]) << name << " step " << i + 1;  // null: f16 skipped it
    for (const char* f16 : {"loss_scale", "skipped_steps"})
      EXPECT_EQ(ms[i].value(f16, nlohmann::json()), me[i].value(f16, nlohmann::json())) << name << " step " << i + 1;
    if (me[i].contains("val_loss")) {
      EXPECT_EQ(ms[i]["val_loss"].get<double>(), me[i]["val_loss"].get<double>()) << name << " step " << i + 1;
    }
    EXPECT_FALSE(me[i].contains("graph_traces"));
    EXPECT_EQ(ms[i].value("graph_traces", int64_t(-1)), i == 0 ? 0 : 1) << name << " step " << i + 1;
  }
  EXPECT_FALSE(eager.checkpoint_path.empty());
  if (!eager.checkpoint_path.empty()) {
    expect_same_tensor_file(std::filesystem::path(eager.checkpoint_path) / "model.safetensors",
                            std::filesystem::path(stat.checkpoint_path) / "model.safetensors");
    expect_same_tensor_file(std::filesystem::path(eager.checkpoint_path) / "optimizer.safetensors",
                            std::filesystem::path(stat.checkpoint_path) / "optimizer.safetensors");
  }
  std::filesystem::remove_all(e);
  std::filesystem::remove_all(s);
  return me;
}

}  // namespace trireme::testing
