// train.mode = "static" runs every configuration eager mode runs: the cases it once refused (SGD,
// recomputation, LoRA, fine-tuning tasks, pipelines, fine-tuning and LoRA inside pipelines,
// sequence parallelism, ZeRO-3, parallel.auto, f16) are accepted when the config is read.
// A train.mode other than eager or static stops `trireme train` with exit status 2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/run_command.h"
#include "tiny_trainer_config.h"
#include "trireme/io/config.h"

using namespace trireme;

TEST(StaticRefusals, LiftedCasesAreAccepted) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_lifted");
  for (const std::vector<std::string>& set :
       {std::vector<std::string>{"optim.name=sgd"}, {"memory.recompute=full"}, {"memory.recompute=selective"},
        {"lora.rank=4", "lora.dropout=0.1"}, {"finetune.task=sft", "finetune.train_file=x.jsonl"},
        {"finetune.task=classify", "finetune.train_file=x.jsonl"}, {"parallel.pp=2"},
        {"parallel.pp=2", "finetune.task=sft", "finetune.train_file=x.jsonl"},
        {"parallel.pp=2", "finetune.task=classify", "finetune.train_file=x.jsonl"}, {"parallel.pp=2", "lora.rank=4"},
        {"parallel.tp=2", "parallel.sequence_parallel=true"}, {"parallel.dp=2", "parallel.zero=3"},
        {"parallel.auto=true"}, {"train.precision=f16"}, {"train.precision=f16", "parallel.dp=2", "parallel.tp=2"},
        {"train.precision=f16", "parallel.dp=2", "parallel.zero=3"}, {"train.precision=f16", "parallel.pp=2"}}) {
    std::vector<std::string> with_static = set;
    with_static.push_back("train.mode=static");
    EXPECT_NO_THROW(trireme::testing::tiny_trainer_config(d, 10, 0.0, with_static)) << set.front();
  }
}

TEST(StaticRefusals, AnUnknownModeExitsTwoNamingTheKey) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_unknown_mode");
  auto r = trireme::cli_testing::run("train --set train.mode=lazy --set train.out_dir=" + d);
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("train.mode"), std::string::npos) << r.out;
}
