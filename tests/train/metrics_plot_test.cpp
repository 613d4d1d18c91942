// Metrics JSON lines and the SVG loss curve.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trireme/core/error.h"
#include "trireme/train/metrics.h"
#include "trireme/train/plot.h"
#include "trireme/train/progress.h"

using namespace trireme::train;

TEST(Metrics, WriteReadAndPlot) {
  std::string path = std::filesystem::temp_directory_path() / ("m_" + std::to_string(::getpid()) + ".jsonl");
  {
    MetricsWriter w(path, false);
    for (int s = 1; s <= 20; ++s) {
      StepMetrics m;
      m.step = s;
      m.loss = 5.0 / s;
      if (s % 5 == 0) m.val_loss = 5.5 / s;
      w.write(m);
    }
  }
  auto rows = read_metrics(path);
  ASSERT_EQ(rows.size(), 20u);
  EXPECT_EQ(rows[4]["val_loss"].get<double>(), 1.1);
  EXPECT_FALSE(rows[3].contains("val_loss"));
  std::string svg = loss_curve_svg(rows, "t");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("validation loss"), std::string::npos);
  std::ofstream(path, std::ios::app) << "garbage\n";
  EXPECT_THROW(read_metrics(path), trireme::Error);
  std::filesystem::remove(path);
}

TEST(Progress, DurationFormat) {
  EXPECT_EQ(format_duration(5), "5s");
  EXPECT_EQ(format_duration(65), "1m05s");
  EXPECT_EQ(format_duration(7380), "2h03m");
}
