// The checkpoint readers on a folder whose files come from the fuzzer (checkpoint_files.h says
// how one input holds them): checkpoint_problem, load_checkpoint_model, load_checkpoint and
// load_checkpoint_optimizer each refuse it with trireme::Error naming the folder, or load it.
#include <cstdint>
#include <filesystem>
#include <string_view>

#include "checkpoint_files.h"
#include "fuzz_support.h"
#include "trireme/core/error.h"
#include "trireme/train/checkpoint.h"

using namespace trireme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path dir = fuzz::temp_dir() / "step_00000001";
  std::filesystem::create_directories(dir);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  bool more = true;
  for (std::string_view name : fuzz::kCheckpointFiles) {
    const std::filesystem::path path = dir / name;
    std::filesystem::remove(path);
    if (!more) continue;
    const size_t sep = rest.find(fuzz::kCheckpointFileSeparator);
    fuzz::write_bytes(path, rest.substr(0, sep));
    more = sep != std::string_view::npos;
    if (more) rest.remove_prefix(sep + fuzz::kCheckpointFileSeparator.size());
  }
  try {
    train::checkpoint_problem(dir);
  } catch (const Error&) {
  }
  try {
    train::load_checkpoint_model(dir);
  } catch (const Error&) {
  }
  train::Checkpoint ckpt;
  try {
    ckpt = train::load_checkpoint(dir);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(ckpt.state.is_object(), "a loaded checkpoint's state is an object");
  if (ckpt.state.contains("world_size")) {
    for (int rank : {0, 1}) {
      try {
        train::load_checkpoint_optimizer(dir, rank);
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
