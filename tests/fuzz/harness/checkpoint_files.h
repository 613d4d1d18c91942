// How the checkpoint harness packs a checkpoint folder into one input: the files' bytes in the
// order of kCheckpointFiles, separated by kCheckpointFileSeparator; files past the last
// section are absent (so missing-file paths are fuzzed too). make_corpus writes seeds this way.
#pragma once

#include <array>
#include <string_view>

namespace fuzz {

inline constexpr std::string_view kCheckpointFileSeparator = "\n--trireme-fuzz-next-file--\n";
inline constexpr std::array<std::string_view, 5> kCheckpointFiles = {
    "state.json", "model.safetensors", "optimizer.safetensors", "optimizer.rank0.safetensors",
    "optimizer.rank1.safetensors"};

}  // namespace fuzz
