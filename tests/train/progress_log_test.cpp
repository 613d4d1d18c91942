// The training log: lines every log_interval steps with the interval's (not the run's average)
// ms/step and tokens/s, the learning rate and MFU when the peak is known; on a terminal the lines
// stay above the live bar.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "trireme/train/progress.h"
#include "trireme/train/throughput.h"

namespace trireme::train {
namespace {

// Runs `steps` steps through a Progress writing to a temporary file and returns what it wrote.
// Steps 1..2 take 0.1 s each, the later ones 0.01 s, each of 1000 tokens.
std::string run_progress(ProgressOptions o, int64_t steps) {
  std::FILE* f = std::tmpfile();
  o.out = f;
  Progress p(o);
  double elapsed = 0;
  for (int64_t s = o.first_step + 1; s <= o.first_step + steps; ++s) {
    const double dt = s <= 2 ? 0.1 : 0.01;
    elapsed += dt;
    p.update({.step = s, .loss = 5.0 - 0.1 * double(s), .lr = 3e-4, .tokens = 1000, .step_s = dt, .elapsed_s = elapsed});
  }
  p.finish();
  std::string out(size_t(std::ftell(f)), '\0');
  std::rewind(f);
  out.resize(std::fread(out.data(), 1, out.size(), f));
  std::fclose(f);
  return out;
}

TEST(ProgressLog, LinesEveryIntervalWithTheIntervalsRates) {
  const std::string out = run_progress({.total_steps = 6, .log_interval = 2}, 6);
  // Step 1 (the first), then every 2nd step.
  EXPECT_NE(out.find("step 1/6 | loss 4.9000 | 100.0 ms/step | 10,000 tok/s | lr 3.00e-04"), std::string::npos) << out;
  EXPECT_NE(out.find("step 2/6 | loss 4.8000 | 100.0 ms/step | 10,000 tok/s"), std::string::npos) << out;
  // Steps 3-4 ran at 0.01 s: the line shows them, not the average since step 1.
  EXPECT_NE(out.find("step 4/6 | loss 4.6000 | 10.0 ms/step | 100,000 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("step 6/6"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 3/6"), std::string::npos) << out;
  EXPECT_EQ(out.find("MFU"), std::string::npos) << "no peak given, no MFU: " << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no bar off a terminal: " << out;
}

TEST(ProgressLog, MfuWhenThePeakIsKnown) {
  // 1e9 FLOPs per token at 100,000 tok/s = 1e14 FLOP/s of a 1e15 peak: 10%.
  const std::string out =
      run_progress({.total_steps = 4, .log_interval = 2, .flops_per_token = 1e9, .peak_flops = 1e15}, 4);
  EXPECT_NE(out.find("step 4/4 | loss 4.6000 | 10.0 ms/step | 100,000 tok/s | lr 3.00e-04 | MFU 10.0%"),
            std::string::npos)
      << out;
}

TEST(ProgressLog, OnATerminalTheLinesStayAboveTheBar) {
  const std::string out = run_progress({.total_steps = 4, .log_interval = 2, .interactive = true}, 4);
  EXPECT_NE(out.find("\r["), std::string::npos) << "the bar is drawn";
  // Every log line is erased-then-written whole and ends in a newline, so it stays on screen.
  for (const char* line : {"step 1/4 |", "step 2/4 |", "step 4/4 |"}) {
    const size_t at = out.find(line);
    ASSERT_NE(at, std::string::npos) << line << " in " << out;
    EXPECT_NE(out.find('\n', at), std::string::npos);
    EXPECT_LT(out.find('\n', at), out.find('\r', at)) << line << " is finished before the bar is redrawn";
  }
}

TEST(ProgressLog, AResumeCountsFromItsFirstStep) {
  const std::string out = run_progress({.total_steps = 104, .log_interval = 50, .first_step = 100}, 4);
  EXPECT_NE(out.find("step 101/104"), std::string::npos) << out;
  EXPECT_NE(out.find("step 104/104"), std::string::npos) << out;
}

TEST(Throughput, ModelFlopsAndKnownPeaks) {
  // 6 per parameter plus 12 * layers * d_model * block_size.
  EXPECT_DOUBLE_EQ(model_flops_per_token(1000, 2, 8, 16), 6.0 * 1000 + 12.0 * 2 * 8 * 16);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops_for("NVIDIA H200"), 989.4e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops_for("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops_for("NVIDIA H100 PCIe"), 756.0e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops_for("NVIDIA A100-SXM4-80GB"), 312.0e12);
  EXPECT_FALSE(bf16_peak_flops_for("NVIDIA GeForce RTX 4090").has_value());
  EXPECT_FALSE(device_peak_flops(Device::cpu()).has_value()) << "the CPU's peak is not guessed";
}

}  // namespace
}  // namespace trireme::train
