// Atomic, verified checkpoint folders (see checkpoint.h).
#include "trireme/train/checkpoint.h"

#include <unistd.h>

// GCC 12 reports xxHash's AVX-512 intrinsics as reading uninitialised values (a false positive
// from the intrinsics' own headers, GCC PR105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "trireme/core/error.h"
#include "trireme/dist/process_group.h"
#include "trireme/io/file_write.h"
#include "trireme/io/safetensors.h"
#include "trireme/models/lora_names.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {

constexpr const char* kFormat = "trireme-checkpoint-1";
constexpr const char* kStepMetadata = "trireme.step";

std::function<void()>& after_model_written_hook() {
  static std::function<void()> hook;
  return hook;
}

// The step of a folder named step_<digits>, or nullopt for any other name.
std::optional<int64_t> step_of_folder(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// The byte range of each tensor in a serialized safetensors file (header read only).
std::map<std::string, std::string_view> tensor_bytes(std::string_view file) {
  std::map<std::string, std::string_view> out;
  if (file.size() < 8) return out;
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);  // little-endian, as every supported host
  if (n > file.size() - 8) return out;
  auto header = nlohmann::json::parse(file.substr(8, n), nullptr, false);
  if (!header.is_object()) return out;
  const std::string_view data = file.substr(8 + n);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__" || !entry.is_object() || !entry.contains("data_offsets")) continue;
    const auto& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) continue;
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b <= e && e <= data.size()) out[name] = data.substr(b, e - b);
  }
  return out;
}

// Serializes tensors with the step in their metadata, writes and fsyncs the file, and returns
// its entry for state.json's "files".
nlohmann::json write_tensor_file(const fs::path& path, const NamedTensors& tensors, int64_t step) {
  const std::string bytes = io::serialize_safetensors(tensors, {{kStepMetadata, std::to_string(step)}});
  io::write_file(path, bytes);
  nlohmann::json per_tensor = nlohmann::json::object();
  for (const auto& [name, range] : tensor_bytes(bytes)) per_tensor[name] = checkpoint_checksum(range);
  return {{"xxh3", checkpoint_checksum(bytes)}, {"step", step}, {"tensors", per_tensor}};
}

// Renames the finished temporary folder into place, points `latest` at it and rotates.
void publish(const fs::path& root, const fs::path& tmp, int64_t step, int keep) {
  const std::string name = checkpoint_folder_name(step);
  const fs::path final_dir = root / name;
  io::fsync_path(tmp, true);
  if (fs::exists(final_dir)) fs::remove_all(final_dir);  // re-saving the same step
  fs::rename(tmp, final_dir);
  io::fsync_path(root, true);
  io::write_file_atomic(root / "latest", name + "\n");

  // Keep the newest `keep` checkpoints up to this one: of the older folders, only complete
  // ones count and only complete ones go (a damaged one may still be someone's only copy of a
  // file); newer ones (a resume from an older checkpoint) are never touched.
  if (keep <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> older;
  for (const auto& e : fs::directory_iterator(root)) {
    auto s = step_of_folder(e.path().filename().string());
    if (s && *s < step && e.is_directory() && fs::exists(e.path() / "state.json")) older.emplace_back(*s, e.path());
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = size_t(keep - 1); i < older.size(); ++i) fs::remove_all(older[i].second);
}

void remove_leftovers(const fs::path& root) {
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().rfind(".step_", 0) == 0) fs::remove_all(e.path());
  }
}

nlohmann::json state_with_format(const Checkpoint& ckpt) {
  nlohmann::json state = ckpt.state;
  state["step"] = ckpt.step;
  state["format"] = kFormat;
  return state;
}

[[noreturn]] void refuse(const fs::path& dir, const std::string& what) {
  TRIREME_FAIL("checkpoint '", dir.string(), "': ", what);
}

// state.json, its keys checked by type (errors name the file and the key) and its step checked
// against the folder name.
nlohmann::json read_state(const fs::path& dir) {
  TRIREME_CHECK(fs::is_directory(dir), "checkpoint '", dir.string(), "' is not a folder");
  const fs::path file = dir / "state.json";
  if (!fs::exists(file)) refuse(dir, "incomplete: state.json is missing");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(io::read_file(file));
  } catch (const nlohmann::json::exception& e) {
    refuse(dir, str_cat("state.json is not valid JSON (", e.what(), ")"));
  }
  const std::string f = (dir / "state.json").string();
  TRIREME_CHECK(state.is_object() && state.contains("format") && state["format"] == kFormat, f,
                ": not a trireme checkpoint state (\"format\" is not \"", kFormat, "\")");
  auto need_int = [&](const char* key) {
    TRIREME_CHECK(state.contains(key), f, ": key \"", key, "\" is missing");
    TRIREME_CHECK(state[key].is_number_integer(), f, ": key \"", key, "\" must be an integer, but is ",
                  state[key].type_name(), " (", state[key].dump(), ")");
    return state[key].get<int64_t>();
  };
  const int64_t step = need_int("step");
  TRIREME_CHECK(step >= 0, f, ": key \"step\" is negative (", step, ")");
  if (auto folder_step = step_of_folder(dir.filename().string())) {
    TRIREME_CHECK(*folder_step == step, f, ": key \"step\" is ", step, " but the folder is ", dir.filename().string(),
                  " (step ", *folder_step, "); the checkpoint is damaged");
  }
  if (state.contains("world_size")) {
    const int64_t world = need_int("world_size");
    TRIREME_CHECK(world >= 1 && world <= 1 << 20, f, ": key \"world_size\" is ", world, ", not a process count");
  }
  if (state.contains("files")) {
    TRIREME_CHECK(state["files"].is_object(), f, ": key \"files\" must be an object, but is ", state["files"].type_name());
    for (const auto& [name, entry] : state["files"].items()) {
      const std::string key = "files." + name;
      TRIREME_CHECK(entry.is_object(), f, ": key \"", key, "\" must be an object, but is ", entry.type_name());
      TRIREME_CHECK(entry.contains("xxh3") && entry["xxh3"].is_string(), f, ": key \"", key,
                    ".xxh3\" must be a string (the file's checksum)");
      TRIREME_CHECK(entry.contains("step") && entry["step"].is_number_integer(), f, ": key \"", key,
                    ".step\" must be an integer");
      TRIREME_CHECK(entry["step"].get<int64_t>() == step, f, ": key \"", key, ".step\" is ", entry["step"].dump(),
                    " but the checkpoint is step ", step, "; ", name, " belongs to another step");
      TRIREME_CHECK(!entry.contains("tensors") || entry["tensors"].is_object(), f, ": key \"", key,
                    ".tensors\" must be an object");
    }
  }
  return state;
}

// One tensor file of the checkpoint, verified against state.json (when it has checksums).
NamedTensors read_tensor_file(const fs::path& dir, const std::string& name, const nlohmann::json& state) {
  const fs::path path = dir / name;
  if (!fs::exists(path)) refuse(dir, str_cat("incomplete: ", name, " is missing"));
  const std::string bytes = io::read_file(path);
  const int64_t step = state["step"].get<int64_t>();
  if (state.contains("files")) {
    const auto& files = state["files"];
    if (!files.contains(name)) refuse(dir, str_cat(name, " is not listed in state.json's \"files\" (not this checkpoint's file)"));
    const auto& entry = files[name];
    const std::string want = entry["xxh3"].get<std::string>(), got = checkpoint_checksum(bytes);
    if (got != want) {
      std::string tensors;
      if (entry.contains("tensors")) {
        const auto ranges = tensor_bytes(bytes);
        for (const auto& [t, sum] : entry["tensors"].items()) {
          auto it = ranges.find(t);
          if (it == ranges.end() || !sum.is_string() || checkpoint_checksum(it->second) != sum.get<std::string>()) {
            tensors += (tensors.empty() ? "" : ", ") + t;
          }
        }
      }
      refuse(dir, str_cat(name, " is damaged: its checksum is ", got, " but state.json records ", want,
                          tensors.empty() ? std::string() : str_cat(" (tensor ", tensors, " changed)"),
                          "; resume from another checkpoint"));
    }
  }
  io::SafetensorsFile file = io::parse_safetensors(bytes, path.string());
  if (auto it = file.metadata.find(kStepMetadata); it != file.metadata.end() && it->second != std::to_string(step)) {
    refuse(dir, str_cat(name, " belongs to step ", it->second, " but state.json is step ", step));
  }
  NamedTensors out;
  for (const std::string& n : file.order) out.emplace_back(n, file.tensors.at(n));
  return out;
}

bool is_integer(DType t) { return t == DType::i64 || t == DType::i32; }

// What an optimizer needs from its state file (see load_checkpoint_optimizer).
void check_optimizer_state(const fs::path& file, const NamedTensors& tensors, const NamedTensors* model) {
  const std::string f = file.string();
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : tensors) by_name[n] = &t;
  auto step = by_name.find("step");
  TRIREME_CHECK(step != by_name.end(), f, ": tensor \"step\" is missing (not an optimizer state file?)");
  TRIREME_CHECK(is_integer(step->second->dtype()) && step->second->numel() == 1, f,
                ": tensor \"step\" must be one integer, but is ", dtype_name(step->second->dtype()), " ",
                step->second->sizes());
  std::map<std::string, std::set<std::string>> keys_of;  // parameter -> its state keys
  std::set<std::string> all_keys;
  for (const auto& [n, t] : tensors) {
    if (n == "step") continue;
    if (n.rfind("zero.", 0) == 0) {
      TRIREME_CHECK(is_integer(t.dtype()), f, ": tensor \"", n, "\" must be an integer, but is ", dtype_name(t.dtype()));
      continue;
    }
    TRIREME_CHECK(is_floating(t.dtype()), f, ": tensor \"", n, "\" must be floating point, but is ",
                  dtype_name(t.dtype()), "; the file is damaged or not trireme's");
    if (n.rfind("state.", 0) != 0) continue;
    const size_t dot = n.rfind('.');
    if (dot <= 6) continue;
    keys_of[n.substr(6, dot - 6)].insert(n.substr(dot + 1));
    all_keys.insert(n.substr(dot + 1));
  }
  if (all_keys.count("exp_avg") || all_keys.count("exp_avg_sq")) all_keys.insert({"exp_avg", "exp_avg_sq"});
  for (const auto& [param, keys] : keys_of) {
    for (const std::string& k : all_keys) {
      TRIREME_CHECK(keys.count(k), f, ": tensor \"state.", param, ".", k, "\" is missing (the optimizer needs it)");
    }
  }
  // A one-process optimizer past its first step has state for every parameter, and the model
  // file holds exactly the parameters; with LoRA adapters, only they train (models/lora_names.h).
  if (model && !all_keys.empty()) {
    const bool lora = !models::lora_tensors(*model).empty();
    for (const auto& [n, t] : *model) {
      if (lora && !models::is_lora_name(n)) continue;
      if (!keys_of.count(n)) {
        TRIREME_FAIL(f, ": tensor \"state.", n, ".", *all_keys.begin(), "\" is missing (the optimizer needs it)");
      }
    }
  }
}

}  // namespace

std::string checkpoint_folder_name(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_checksum(std::string_view bytes) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  return buf;
}

void set_save_checkpoint_test_hook(std::function<void()> after_model_written) {
  after_model_written_hook() = std::move(after_model_written);
}

fs::path save_checkpoint(const fs::path& root, const Checkpoint& ckpt, int keep) {
  fs::create_directories(root);
  const std::string name = checkpoint_folder_name(ckpt.step);
  const fs::path tmp = root / ("." + name + ".tmp." + std::to_string(::getpid()));
  remove_leftovers(root);  // of saves that were killed
  fs::create_directories(tmp);
  nlohmann::json state = state_with_format(ckpt);
  state["files"]["model.safetensors"] = write_tensor_file(tmp / "model.safetensors", ckpt.model, ckpt.step);
  if (after_model_written_hook()) after_model_written_hook()();  // a test's seam (checkpoint.h)
  state["files"]["optimizer.safetensors"] = write_tensor_file(tmp / "optimizer.safetensors", ckpt.optimizer, ckpt.step);
  io::write_file(tmp / "state.json", state.dump(2));
  publish(root, tmp, ckpt.step, keep);
  return root / name;
}

fs::path save_checkpoint_distributed(const fs::path& root, const Checkpoint& ckpt, dist::ProcessGroup& world, int keep) {
  const int rank = world.rank(), size = world.size();
  const std::string name = checkpoint_folder_name(ckpt.step);
  // One temporary name for the whole group (every rank must find it without being told).
  const fs::path tmp = root / ("." + name + ".tmp.dist");
  if (rank == 0) {
    fs::create_directories(root);
    remove_leftovers(root);
    fs::create_directories(tmp);
  }
  world.barrier()->wait();
  if (rank != 0 && !ckpt.model.empty()) {
    io::write_file(tmp / ("model.part" + std::to_string(rank) + ".safetensors"), io::serialize_safetensors(ckpt.model));
  }
  // Each rank's optimizer entry for state.json goes to rank 0 through a small file beside it.
  const std::string opt_name = "optimizer.rank" + std::to_string(rank) + ".safetensors";
  const nlohmann::json opt_entry = write_tensor_file(tmp / opt_name, ckpt.optimizer, ckpt.step);
  io::write_file(tmp / (opt_name + ".entry"), opt_entry.dump());
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
    nlohmann::json state = state_with_format(ckpt);
    state["world_size"] = size;
    state["files"]["model.safetensors"] = write_tensor_file(tmp / "model.safetensors", model, ckpt.step);
    for (int r = 0; r < size; ++r) {
      const std::string f = "optimizer.rank" + std::to_string(r) + ".safetensors";
      state["files"][f] = nlohmann::json::parse(io::read_file(tmp / (f + ".entry")));
      fs::remove(tmp / (f + ".entry"));
    }
    io::write_file(tmp / "state.json", state.dump(2));
    publish(root, tmp, ckpt.step, keep);
  }
  world.barrier()->wait();
  return root / name;
}

Checkpoint load_checkpoint_model(const fs::path& dir) {
  Checkpoint ckpt;
  ckpt.state = read_state(dir);
  ckpt.step = ckpt.state["step"].get<int64_t>();
  ckpt.verified = ckpt.state.contains("files");
  ckpt.model = read_tensor_file(dir, "model.safetensors", ckpt.state);
  if (!ckpt.verified) {
    static bool said = false;  // once per process: every rank and every file would repeat it
    if (!said) {
      std::fprintf(stderr, "checkpoint: %s has no checksums (written by an older trireme); loading it unverified\n",
                   dir.string().c_str());
      said = true;
    }
  }
  return ckpt;
}

Checkpoint load_checkpoint(const fs::path& dir) {
  Checkpoint ckpt = load_checkpoint_model(dir);
  if (!ckpt.state.contains("world_size")) ckpt.optimizer = read_tensor_file(dir, "optimizer.safetensors", ckpt.state);
  return ckpt;
}

NamedTensors load_checkpoint_optimizer(const fs::path& dir, int rank) {
  const nlohmann::json state = read_state(dir);
  if (state.contains("world_size")) {
    const int64_t world = state["world_size"].get<int64_t>();
    TRIREME_CHECK(rank < world, "checkpoint '", dir.string(), "' was written by ", world,
                  " processes and has no optimizer state for rank ", rank);
    const std::string name = "optimizer.rank" + std::to_string(rank) + ".safetensors";
    NamedTensors opt = read_tensor_file(dir, name, state);
    check_optimizer_state(dir / name, opt, nullptr);
    return opt;
  }
  TRIREME_CHECK(rank == 0, "checkpoint '", dir.string(), "' was written by one process and has no optimizer state for rank ",
                rank);
  NamedTensors model = read_tensor_file(dir, "model.safetensors", state);
  NamedTensors opt = read_tensor_file(dir, "optimizer.safetensors", state);
  check_optimizer_state(dir / "optimizer.safetensors", opt, &model);
  return opt;
}

std::optional<std::string> checkpoint_problem(const fs::path& dir, int64_t expected_step) {
  try {
    const nlohmann::json state = read_state(dir);
    if (expected_step >= 0 && state["step"].get<int64_t>() != expected_step) {
      return str_cat("state.json is step ", state["step"].get<int64_t>(), ", expected ", expected_step);
    }
    if (state.contains("world_size")) {
      load_checkpoint_model(dir);
      for (int64_t r = 0; r < state["world_size"].get<int64_t>(); ++r) load_checkpoint_optimizer(dir, int(r));
    } else {
      load_checkpoint_optimizer(dir, 0);  // reads and checks the model file too
    }
  } catch (const Error& e) {
    return std::string(e.what());
  } catch (const std::exception& e) {
    return str_cat("checkpoint '", dir.string(), "': ", e.what());
  }
  return std::nullopt;
}

ResumePoint find_resume_checkpoint(const fs::path& root) {
  ResumePoint rp;
  std::vector<std::pair<int64_t, fs::path>> folders;
  if (fs::is_directory(root)) {
    for (const auto& e : fs::directory_iterator(root)) {
      auto s = step_of_folder(e.path().filename().string());
      if (s && e.is_directory()) folders.emplace_back(*s, e.path());
    }
  }
  rp.found_any = !folders.empty();
  const fs::path pointer = root / "latest";
  std::string pointed;
  if (fs::exists(pointer)) {
    try {
      pointed = io::read_file(pointer);
    } catch (const Error& e) {
      rp.notes.push_back(e.what());
    }
    while (!pointed.empty() && (pointed.back() == '\n' || pointed.back() == '\r' || pointed.back() == ' ')) pointed.pop_back();
    if (pointed.empty()) {
      rp.notes.push_back(str_cat(pointer.string(), " is empty"));
    } else if (!step_of_folder(pointed)) {
      rp.notes.push_back(str_cat(pointer.string(), " does not name a checkpoint folder"));
    } else if (!fs::is_directory(root / pointed)) {
      rp.notes.push_back(str_cat(pointer.string(), " names ", pointed, ", which does not exist"));
    } else if (auto problem = checkpoint_problem(root / pointed)) {
      rp.notes.push_back(str_cat(pointer.string(), " names a damaged checkpoint: ", *problem));
    } else {
      rp.dir = root / pointed;
      rp.step = *step_of_folder(pointed);
      return rp;
    }
  } else if (rp.found_any) {
    rp.notes.push_back(str_cat(pointer.string(), " is missing"));
  }
  std::sort(folders.rbegin(), folders.rend());
  for (const auto& [step, dir] : folders) {
    if (dir.filename().string() == pointed) continue;  // already judged above
    if (auto problem = checkpoint_problem(dir)) {
      rp.notes.push_back(str_cat("skipping ", dir.filename().string(), ": ", *problem));
      continue;
    }
    rp.notes.push_back(str_cat("using ", dir.filename().string(), ", the newest complete checkpoint"));
    rp.dir = dir;
    rp.step = step;
    return rp;
  }
  return rp;
}

std::optional<fs::path> find_latest_checkpoint(const fs::path& root_or_dir) {
  if (fs::exists(root_or_dir / "state.json")) return root_or_dir;
  for (const fs::path& root : {root_or_dir, root_or_dir / "checkpoints"}) {
    if (!fs::is_directory(root)) continue;
    std::string name;
    try {
      if (fs::exists(root / "latest")) name = io::read_file(root / "latest");
    } catch (const Error&) {
    }
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (step_of_folder(name) && fs::exists(root / name / "state.json")) return root / name;
    std::optional<std::pair<int64_t, fs::path>> newest;
    for (const auto& e : fs::directory_iterator(root)) {
      auto s = step_of_folder(e.path().filename().string());
      if (s && fs::exists(e.path() / "state.json") && (!newest || *s > newest->first)) newest.emplace(*s, e.path());
    }
    if (newest) return newest->second;
  }
  return std::nullopt;
}

}  // namespace trireme::train
