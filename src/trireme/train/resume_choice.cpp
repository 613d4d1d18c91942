// Which checkpoint a resumed run continues from (see resume_choice.h).
#include "trireme/train/resume_choice.h"

#include "trireme/ops/copy.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/run_dir.h"

namespace fs = std::filesystem;

namespace trireme::train {

std::optional<fs::path> choose_resume_checkpoint(const fs::path& root, dist::ProcessGroup* world, Device device,
                                                 const std::function<void(const std::string&)>& log) {
  const bool main_rank = !world || world->rank() == 0;
  int64_t chosen = -1;  // -1: none, -2: refused
  std::string refusal;
  if (main_rank) {
    ResumePoint rp = find_resume_checkpoint(root);
    if (rp.dir) {
      for (const std::string& n : rp.notes) log("resume: " + n);
      chosen = rp.step;
    } else if (rp.found_any) {
      chosen = -2;
      refusal = str_cat("resume: no complete checkpoint under ", root.string(), " (");
      for (size_t i = 0; i < rp.notes.size(); ++i) refusal += (i ? "; " : "") + rp.notes[i];
      refusal += "); nothing was changed. Repair or remove the damaged checkpoints, or use --overwrite to start over";
    }
  }
  if (world) {
    Tensor t = Tensor::empty({1}, DType::i64);
    t.data<int64_t>()[0] = chosen;
    Tensor on_device = to_device(t, device);  // NCCL groups take GPU tensors only
    world->broadcast(on_device, {.root = 0})->wait();
    chosen = to_device(on_device, Device::cpu()).data<int64_t>()[0];
  }
  if (chosen == -2) {
    if (main_rank) throw RunRefused(refusal);
    TRIREME_FAIL("resume: rank 0 found no complete checkpoint under ", root.string());
  }
  if (chosen == -1) return std::nullopt;
  return root / checkpoint_folder_name(chosen);
}

}  // namespace trireme::train
