// Which checkpoint a resumed run continues from: the trainer's and the classifier's choice, made
// once for the whole job.
//
//   auto dir = choose_resume_checkpoint(out_dir / "checkpoints", job.world.get(), device, log);
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "trireme/core/device.h"
#include "trireme/dist/process_group.h"

namespace trireme::train {

// The newest complete checkpoint under `root`, chosen by rank 0 of `world` (null: one process)
// and broadcast, so that the ranks cannot pick different ones while files change under the job.
// nullopt: no checkpoint at all (start at step 0). Only damaged checkpoints: RunRefused on rank 0
// naming them (the other ranks throw trireme::Error). `log` gets rank 0's notes on what it skipped.
// Collective over `world`.
std::optional<std::filesystem::path> choose_resume_checkpoint(const std::filesystem::path& root,
                                                              dist::ProcessGroup* world, Device device,
                                                              const std::function<void(const std::string&)>& log);

}  // namespace trireme::train
