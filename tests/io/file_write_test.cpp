// Checked writes: a full disk or a missing folder is an error naming the file and the reason.
#include <gtest/gtest.h>

#include "expect_error.h"


#include "io_test_util.h"
#include "trireme/core/checked.h"
#include "trireme/io/file_write.h"

using namespace trireme;
using namespace trireme::io;


TEST(FileWrite, AtomicWriteReplacesWholeAndLeavesNoTemporary) {
  auto dir = io::testing::scratch_dir();
  write_file_atomic(dir / "a.json", "first");
  write_file_atomic(dir / "a.json", "second");
  EXPECT_EQ(io::read_file(dir / "a.json"), "second");
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) ++n, (void)e;
  EXPECT_EQ(n, 1);
}

TEST(FileWrite, FullDiskNamesFileAndReason) {
  std::string msg = trireme::testing::error_message([] { io::write_file("/dev/full", "some bytes", /*durable=*/false); });
  EXPECT_NE(msg.find("/dev/full"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;

  AppendFile f("/dev/full", AppendFile::Mode::kAppend);
  msg = trireme::testing::error_message([&] { f.write_line("{\"step\": 1}"); });
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
}

TEST(FileWrite, MissingFolderNamesFile) {
  std::string msg = trireme::testing::error_message([] { write_file_atomic("/nonexistent_trireme_dir/x.json", "x"); });
  EXPECT_NE(msg.find("x.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
}

TEST(CheckedArithmetic, OverflowIsAnErrorNamingTheQuantity) {
  EXPECT_EQ(checked_mul<int64_t>(1 << 20, 1 << 20, "x"), int64_t(1) << 40);
  std::string msg = trireme::testing::error_message([] { checked_mul<int64_t>(int64_t(1) << 40, int64_t(1) << 40, "batch tokens"); });
  EXPECT_NE(msg.find("batch tokens"), std::string::npos) << msg;
  msg = trireme::testing::error_message([] { checked_add<int64_t>(INT64_MAX, 1, "block_size + 1"); });
  EXPECT_NE(msg.find("block_size + 1"), std::string::npos) << msg;
  msg = trireme::testing::error_message([] { checked_cast<size_t>(int64_t(-1), "count"); });
  EXPECT_NE(msg.find("count"), std::string::npos) << msg;
  EXPECT_EQ(checked_cast<int32_t>(int64_t(7), "x"), 7);
}
