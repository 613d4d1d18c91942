// Atomic checkpoint folders (see checkpoint.h).
#include "trireme/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "trireme/core/error.h"
#include "trireme/dist/process_group.h"
#include "trireme/io/safetensors.h"

namespace fs = std::filesystem;

namespace trireme::train {
namespace {

void fsync_path(const fs::path& p, bool directory) {
  int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TRIREME_CHECK(fd >= 0, "checkpoint: cannot open '", p.string(), "' to sync it");
  int rc = ::fsync(fd);
  ::close(fd);
  TRIREME_CHECK(rc == 0, "checkpoint: fsync of '", p.string(), "' failed");
}

void write_file(const fs::path& p, const std::string& bytes) {
  {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    TRIREME_CHECK(f.good(), "checkpoint: cannot write '", p.string(), "'");
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.flush();
    TRIREME_CHECK(f.good(), "checkpoint: writing '", p.string(), "' failed (disk full?)");
  }
  fsync_path(p, false);
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Test hook: TRIREME_TEST_DIE_IN_SAVE=1 kills the process after the model file is written,
// which is how the test proves an interrupted save leaves the previous checkpoint loadable.
void maybe_die_for_test() {
  const char* v = std::getenv("TRIREME_TEST_DIE_IN_SAVE");
  if (v && std::string(v) == "1") std::_Exit(137);
}

// Renames the finished temporary folder into place, points `latest` at it and keeps the newest
// `keep` checkpoints.
void publish(const fs::path& root, const fs::path& tmp, const std::string& name, int keep) {
  const fs::path final_dir = root / name;
  fsync_path(tmp, true);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // re-saving the same step
  fs::rename(tmp, final_dir);
  fsync_path(root, true);

  // Point `latest` at it: write a temporary file, then rename over the old pointer.
  const fs::path latest_tmp = root / (".latest.tmp." + std::to_string(::getpid()));
  write_file(latest_tmp, name + "\n");
  fs::rename(latest_tmp, root / "latest");
  fsync_path(root, true);

  // Keep the newest `keep` checkpoints.
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0) steps.push_back(e.path());
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; keep > 0 && i + size_t(keep) < steps.size(); ++i) {
    if (steps[i] != final_dir) fs::remove_all(steps[i]);
  }
}

void remove_leftovers(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().rfind(".step_", 0) == 0) fs::remove_all(e.path());
  }
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, const Checkpoint& ckpt, int keep) {
  fs::create_directories(root);
  const std::string name = step_name(ckpt.step);
  const fs::path final_dir = root / name;
  const fs::path tmp = root / ("." + name + ".tmp." + std::to_string(::getpid()));
  remove_leftovers(root);  // of saves that were killed
  fs::create_directories(tmp);
  write_file(tmp / "model.safetensors", io::serialize_safetensors(ckpt.model));
  maybe_die_for_test();
  write_file(tmp / "optimizer.safetensors", io::serialize_safetensors(ckpt.optimizer));
  nlohmann::json state = ckpt.state;
  state["step"] = ckpt.step;
  state["format"] = "trireme-checkpoint-1";
  write_file(tmp / "state.json", state.dump(2));
  publish(root, tmp, name, keep);
  return final_dir;
}

fs::path save_checkpoint_distributed(const fs::path& root, const Checkpoint& ckpt, dist::ProcessGroup& world, int keep) {
  const int rank = world.rank(), size = world.size();
  const std::string name = step_name(ckpt.step);
  // One temporary name for the whole group (every rank must find it without being told).
  const fs::path tmp = root / ("." + name + ".tmp.dist");
  if (rank == 0) {
    fs::create_directories(root);
    remove_leftovers(root);
    fs::create_directories(tmp);
  }
  world.barrier()->wait();
  if (rank != 0 && !ckpt.model.empty()) {
    write_file(tmp / ("model.part" + std::to_string(rank) + ".safetensors"), io::serialize_safetensors(ckpt.model));
  }
  write_file(tmp / ("optimizer.rank" + std::to_string(rank) + ".safetensors"), io::serialize_safetensors(ckpt.optimizer));
  world.barrier()->wait();
  if (rank == 0) {
    NamedTensors model = ckpt.model;
    std::set<std::string> seen;
    for (const auto& [n, t] : model) seen.insert(n);
    for (int r = 1; r < size; ++r) {
      const fs::path part = tmp / ("model.part" + std::to_string(r) + ".safetensors");
      if (!fs::exists(part)) continue;
      io::SafetensorsFile file = io::load_safetensors(part.string());
      for (const std::string& n : file.order) {
        if (seen.insert(n).second) model.emplace_back(n, file.tensors.at(n));
      }
      fs::remove(part);
    }
    write_file(tmp / "model.safetensors", io::serialize_safetensors(model));
    nlohmann::json state = ckpt.state;
    state["step"] = ckpt.step;
    state["format"] = "trireme-checkpoint-1";
    state["world_size"] = size;
    write_file(tmp / "state.json", state.dump(2));
    publish(root, tmp, name, keep);
  }
  world.barrier()->wait();
  return root / name;
}

namespace {
NamedTensors load_named(const fs::path& path) {
  io::SafetensorsFile file = io::load_safetensors(path.string());
  NamedTensors out;
  for (const std::string& n : file.order) out.emplace_back(n, file.tensors.at(n));
  return out;
}
}  // namespace

Checkpoint load_checkpoint(const fs::path& dir) {
  TRIREME_CHECK(fs::is_directory(dir), "checkpoint '", dir.string(), "' is not a folder");
  for (const char* f : {"model.safetensors", "state.json"}) {
    TRIREME_CHECK(fs::exists(dir / f), "checkpoint '", dir.string(), "' is incomplete: ", f, " is missing");
  }
  Checkpoint ckpt;
  std::ifstream f(dir / "state.json");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    ckpt.state = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    TRIREME_FAIL("checkpoint '", dir.string(), "': state.json is not valid JSON (", e.what(), ")");
  }
  TRIREME_CHECK(ckpt.state.is_object() && ckpt.state.value("format", "") == "trireme-checkpoint-1" &&
                    ckpt.state.contains("step") && ckpt.state["step"].is_number_integer(),
                "checkpoint '", dir.string(), "': state.json is not a trireme checkpoint state");
  ckpt.step = ckpt.state["step"].get<int64_t>();
  const bool distributed = ckpt.state.contains("world_size");
  if (distributed) {
    const int64_t world = ckpt.state["world_size"].get<int64_t>();
    for (int64_t r = 0; r < world; ++r) {
      const std::string file = "optimizer.rank" + std::to_string(r) + ".safetensors";
      TRIREME_CHECK(fs::exists(dir / file), "checkpoint '", dir.string(), "' is incomplete: ", file, " is missing");
    }
  } else {
    TRIREME_CHECK(fs::exists(dir / "optimizer.safetensors"), "checkpoint '", dir.string(),
                  "' is incomplete: optimizer.safetensors is missing");
    ckpt.optimizer = load_named(dir / "optimizer.safetensors");
  }
  ckpt.model = load_named(dir / "model.safetensors");
  return ckpt;
}

NamedTensors load_checkpoint_optimizer(const fs::path& dir, int rank) {
  const fs::path per_rank = dir / ("optimizer.rank" + std::to_string(rank) + ".safetensors");
  if (fs::exists(per_rank)) return load_named(per_rank);
  TRIREME_CHECK(rank == 0 && fs::exists(dir / "optimizer.safetensors"), "checkpoint '", dir.string(),
                "' has no optimizer state for rank ", rank);
  return load_named(dir / "optimizer.safetensors");
}

std::optional<fs::path> find_latest_checkpoint(const fs::path& root_or_dir) {
  if (fs::exists(root_or_dir / "state.json")) return root_or_dir;
  for (const fs::path& root : {root_or_dir, root_or_dir / "checkpoints"}) {
    std::ifstream f(root / "latest");
    std::string name;
    if (f && std::getline(f, name) && !name.empty() && fs::is_directory(root / name)) return root / name;
  }
  return std::nullopt;
}

}  // namespace trireme::train
