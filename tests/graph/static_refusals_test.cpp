// What train.mode = "static" still cannot run (fine-tuning and LoRA in a pipeline) is refused when
// the config is read, each refusal naming the key to change; what it now runs (SGD, recomputation,
// LoRA, fine-tuning tasks, pipelines for language-model training, sequence parallelism, ZeRO-3,
// parallel.auto, f16) is accepted.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/run_command.h"
#include "tiny_trainer_config.h"
#include "trireme/io/config.h"

using namespace trireme;

TEST(StaticRefusals, EachRemainingRefusalNamesItsKey) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_refusals");
  struct Case {
    std::vector<std::string> set;
    std::string key;
  };
  for (const Case& c : {Case{{"parallel.pp=2", "finetune.task=sft", "finetune.train_file=x.jsonl"}, "parallel.pp"},
                        Case{{"parallel.pp=2", "lora.rank=4"}, "parallel.pp"}}) {
    std::vector<std::string> set = c.set;
    set.push_back("train.mode=static");
    try {
      trireme::testing::tiny_trainer_config(d, 2, 0.0, set);
      ADD_FAILURE() << "accepted: " << c.set.back();
    } catch (const io::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.mode = \"eager\""), std::string::npos) << e.what();
    }
  }
}

// `trireme train` stops with exit status 2 (a config error) before it trains, naming the key.
TEST(StaticRefusals, TrainExitsTwoNamingTheKey) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_refusals_cli");
  for (const char* set : {"--set parallel.pp=2 --set finetune.task=classify --set finetune.train_file=x.jsonl",
                          "--set parallel.pp=2 --set lora.rank=4"}) {
    auto r = trireme::cli_testing::run("train --set train.mode=static --set train.out_dir=" + d + " " + set);
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("parallel.pp"), std::string::npos) << r.out;
  }
}

TEST(StaticRefusals, LiftedCasesAreAccepted) {
  const std::string d = trireme::testing::fresh_run_dir("trireme_static_lifted");
  for (const std::vector<std::string>& set :
       {std::vector<std::string>{"optim.name=sgd"}, {"memory.recompute=full"}, {"memory.recompute=selective"},
        {"lora.rank=4", "lora.dropout=0.1"}, {"finetune.task=sft", "finetune.train_file=x.jsonl"},
        {"finetune.task=classify", "finetune.train_file=x.jsonl"}, {"parallel.pp=2"},
        {"parallel.tp=2", "parallel.sequence_parallel=true"}, {"parallel.dp=2", "parallel.zero=3"},
        {"parallel.auto=true"}, {"train.precision=f16"}, {"train.precision=f16", "parallel.dp=2", "parallel.tp=2"},
        {"train.precision=f16", "parallel.dp=2", "parallel.zero=3"}, {"train.precision=f16", "parallel.pp=2"}}) {
    std::vector<std::string> with_static = set;
    with_static.push_back("train.mode=static");
    EXPECT_NO_THROW(trireme::testing::tiny_trainer_config(d, 10, 0.0, with_static)) << set.front();
  }
}
