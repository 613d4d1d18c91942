// Calibration of this machine (see calibrate.h).
#include "trireme/plan/calibrate.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "trireme/amp/autocast.h"
#include "trireme/autograd/autocast_mode.h"
#include "trireme/core/rng.h"
#include "trireme/cuda/device.h"
#include "trireme/dist/env.h"
#include "trireme/dist/launcher.h"
#include "trireme/dist/process_group_factory.h"
#include "trireme/io/file_write.h"
#include "trireme/models/gpt.h"
#include "trireme/ops/copy.h"
#include "trireme/ops/elementwise.h"
#include "trireme/ops/factory.h"
#include "trireme/ops/linalg.h"
#include "trireme/ops/op_count.h"
#include "trireme/runtime/build_info.h"
#include "trireme/runtime/cpu_features.h"
#include "trireme/runtime/cpu_threads.h"
#include "trireme/train/memory_estimate.h"
#include "trireme/train/parallel_runner.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace trireme::plan {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int64_t kCalibrationProcesses = 2;

// Sets the BLAS and OpenMP threads for the duration of a scope.
class ThreadsFor {
 public:
  explicit ThreadsFor(int n) : saved_(openblas_get_num_threads()) { set(n); }
  ~ThreadsFor() { set(saved_); }

 private:
  static void set(int n) {
    openblas_set_num_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
  }
  int saved_;
};

std::string self_exe() {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  TRIREME_CHECK(n > 0, "plan --calibrate: cannot find this program (/proc/self/exe)");
  return std::string(exe, size_t(n));
}

// Least squares t = a + b x over the samples of one op.
std::pair<double, double> fit_line(const std::vector<CollectiveSample>& s, const std::string& op) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& c : s) {
    if (c.op != op) continue;
    n += 1, sx += c.bytes, sy += c.seconds, sxx += c.bytes * c.bytes, sxy += c.bytes * c.seconds;
  }
  if (n < 2) return {0, 0};
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {std::max(0.0, (sy - b * sx) / n), b};
}

// The model's figures of a profile as JSON (rates in GFLOP/s), as a profile file and a calibration
// worker's result hold them; a profile from before they were measured has none.
void put_model_figures(nlohmann::json& j, const MachineProfile& p) {
  j["model_rates"] = nlohmann::json::array();
  for (const auto& r : p.model_rates)
    j["model_rates"].push_back({{"recompute", r.recompute},
                                {"tokens", r.tokens},
                                {"block_gflops", r.block_flops * 1e-9},
                                {"head_gflops", r.head_flops * 1e-9},
                                {"block_later_ms", r.block_later_s * 1e3},
                                {"head_later_ms", r.head_later_s * 1e3},
                                {"block_host_ms", r.block_host_s * 1e3},
                                {"head_host_ms", r.head_host_s * 1e3}});
  j["measured_model"] = p.measured_model;
  j["step_fixed_s"] = p.step_fixed_s;
  j["optimizer_s_per_parameter"] = p.optimizer_s_per_parameter;
}

void take_model_figures(const nlohmann::json& j, MachineProfile& p) {
  p.model_rates.clear();
  for (const auto& r : j.value("model_rates", nlohmann::json::array()))
    p.model_rates.push_back({r.at("recompute").get<std::string>(), r.at("tokens").get<double>(),
                             r.at("block_gflops").get<double>() * 1e9, r.at("head_gflops").get<double>() * 1e9,
                             r.value("block_later_ms", 0.0) * 1e-3, r.value("head_later_ms", 0.0) * 1e-3,
                             r.value("block_host_ms", 0.0) * 1e-3, r.value("head_host_ms", 0.0) * 1e-3});
  p.measured_model = j.value("measured_model", std::string());
  p.step_fixed_s = j.value("step_fixed_s", 0.0);
  p.optimizer_s_per_parameter = j.value("optimizer_s_per_parameter", 0.0);
}

}  // namespace

std::string machine_fingerprint(const std::string& device) {
  const nlohmann::json b = runtime::build_info();
  if (device == "cuda") {
    const nlohmann::json r = runtime::runtime_info();
    auto text = [&](const char* key) { return r.contains(key) ? (r[key].is_string() ? r[key].get<std::string>() : r[key].dump()) : "?"; };
    return str_cat("gpus=", text("gpus"), "; driver=", text("cuda_driver"), "; cuda=", text("cuda_runtime"),
                   "; cublaslt=", text("cublaslt"), "; nccl=", b.value("nccl", "?"), "; trireme=", b.value("trireme", "?"));
  }
  return str_cat("cpu=", runtime::cpu_model_name(), "; cores=", runtime::available_cpus(), "; trireme=", b.value("trireme", "?"),
                 "; openblas=", openblas_get_config(), "; gloo=", b.value("gloo", "?"));
}

std::string default_profile_path(const std::string& device) {
  fs::path dir;
  if (const char* t = std::getenv("TRIREME_CACHE_DIR"); t && *t)
    dir = t;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = fs::path(x) / "trireme";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = fs::path(h) / ".cache" / "trireme";
  else
    dir = fs::temp_directory_path() / "trireme";
  return (dir / (device == "cuda" ? "plan_profile_cuda.json" : "plan_profile.json")).string();
}

std::optional<MachineProfile> load_profile(const std::string& path, bool required, const std::string& device) {
  if (!fs::exists(path)) {
    if (required)
      throw io::ConfigError(str_cat("--profile: no profile at '", path, "'; run trireme plan --calibrate --profile ",
                                    path, " to make one"));
    return std::nullopt;
  }
  MachineProfile p;
  try {
    const nlohmann::json j = nlohmann::json::parse(io::read_file(path));
    p.device = j.value("device", std::string("cpu"));  // profiles from before GPU calibration are the CPU's
    p.dtype = j.value("dtype", std::string("f32"));
    p.fingerprint = j.at("fingerprint").get<std::string>();
    // Checked as integers: a float would convert to int64 unchecked (undefined when out of range).
    if (!j.at("cores").is_number_integer() || !j.at("processes").is_number_integer())
      throw io::ConfigError(str_cat("profile '", path, "': cores and processes must be integers; run trireme plan "
                                    "--calibrate to write it again"));
    p.cores = j.at("cores").get<int64_t>();
    p.processes = j.at("processes").get<int64_t>();
    p.gemm_gflops = j.at("gemm_gflops").get<double>();
    p.memory_gbs = j.at("memory_gbs").get<double>();
    take_model_figures(j, p);
    p.link.bandwidth_gbs = j.at("link").at("bandwidth_gbs").get<double>();
    p.link.latency_us = j.at("link").at("latency_us").get<double>();
    for (const auto& c : j.at("collectives"))
      p.collectives.push_back(
          {c.at("op").get<std::string>(), c.at("bytes").get<double>(), c.at("seconds").get<double>()});
  } catch (const nlohmann::json::exception& e) {
    throw io::ConfigError(str_cat("profile '", path, "' is not a calibration profile (", e.what(),
                                  "); run trireme plan --calibrate to write it again"));
  }
  // One GPU measures no collectives, and so no link.
  if (p.gemm_gflops <= 0 || p.memory_gbs <= 0 || (!p.collectives.empty() && p.link.bandwidth_gbs <= 0) ||
      p.processes < 1)
    throw io::ConfigError(str_cat("profile '", path, "' holds figures <= 0; run trireme plan --calibrate again"));
  if (p.device != device)
    throw io::ConfigError(str_cat("profile '", path, "' measured train.device = \"", p.device, "\", and this plan is for \"",
                                  device, "\"; run trireme plan --calibrate with train.device = \"", device, "\""));
  const std::string here = machine_fingerprint(device);
  if (p.fingerprint != here)
    throw io::ConfigError(str_cat("profile '", path, "' was measured on another machine or build (\"", p.fingerprint,
                                  "\"; this one is \"", here, "\"); run trireme plan --calibrate to measure this one"));
  return p;
}

void save_profile(const std::string& path, const MachineProfile& p) {
  nlohmann::json j;
  j["device"] = p.device;
  j["dtype"] = p.dtype;
  j["fingerprint"] = p.fingerprint;
  j["cores"] = p.cores;
  j["processes"] = p.processes;
  j["gemm_gflops"] = p.gemm_gflops;
  j["memory_gbs"] = p.memory_gbs;
  put_model_figures(j, p);
  j["link"] = {{"bandwidth_gbs", p.link.bandwidth_gbs}, {"latency_us", p.link.latency_us}};
  j["collectives"] = nlohmann::json::array();
  for (const auto& c : p.collectives)
    j["collectives"].push_back({{"op", c.op}, {"bytes", c.bytes}, {"seconds", c.seconds}});
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  io::write_file_atomic(path, j.dump(2) + "\n");
}

void apply_profile(ClusterSpec& c, const MachineProfile& p, int64_t processes) {
  // CPU: measured with cores / p.processes threads per process; other process counts share the
  // cores in proportion. GPUs: a GPU per process, whatever their number.
  const double share = p.device == "cuda" ? 1.0 : double(p.processes) / double(std::max<int64_t>(processes, 1));
  const double tflops = p.gemm_gflops * 1e-3 * share;
  if (p.device == "cuda") {  // the measured dtype's rate; the others keep the cluster's figures
    if (p.dtype == "f32") c.device.tflops_f32 = tflops;
    else c.device.tflops_bf16 = c.device.tflops_f16 = tflops;
  } else {
    c.device.tflops_f32 = tflops;
    c.device.tflops_bf16 = c.device.tflops_f16 = tflops / 2;  // converted to f32 for the products
  }
  c.device.memory_bandwidth_gbs = p.memory_gbs * share;
  c.device.achieved.clear();
  for (AchievedRate r : p.model_rates) {
    r.block_flops *= share, r.head_flops *= share;
    r.block_later_s /= share, r.head_later_s /= share;  // not the host's queuing: each process queues its own
    c.device.achieved.push_back(r);
  }
  c.device.step_fixed_s = p.step_fixed_s / share;
  c.device.optimizer_s_per_parameter = p.optimizer_s_per_parameter / share;
  if (!p.collectives.empty()) c.intra_node = p.link;  // one GPU measures no link
  c.efficiency.matmul = 1;  // measured throughput is achieved throughput
  c.efficiency.memory = 1;
  if (!p.collectives.empty()) c.efficiency.link = 1;
  c.source = p.device == "cuda" ? "calibrated on this machine's GPUs (trireme plan --calibrate)"
                                : "calibrated on this machine (trireme plan --calibrate)";
}

std::string describe_profile(const MachineProfile& p) {
  std::string out = str_cat("machine: ", p.fingerprint, "\n");
  char buf[256];
  if (p.device == "cuda") {
    std::snprintf(buf, sizeof(buf), "per GPU: GEMM %.1f TFLOP/s in %s at the model's shapes, memory %.1f GB/s\n",
                  p.gemm_gflops * 1e-3, p.dtype.c_str(), p.memory_gbs);
    out += buf;
    if (!p.collectives.empty()) {
      std::snprintf(buf, sizeof(buf), "NCCL between %lld GPUs: %.2f GB/s, %.0f us per message (fitted to the all-reduces)\n",
                    (long long)p.processes, p.link.bandwidth_gbs, p.link.latency_us);
      out += buf;
    }
  } else {
    std::snprintf(buf, sizeof(buf),
                  "per process (%lld threads): GEMM %.1f GFLOP/s at the model's shapes, memory %.1f GB/s\n"
                  "Gloo between %lld processes: %.2f GB/s, %.0f us per message (fitted to the all-reduces)\n",
                  (long long)std::max<int64_t>(1, p.cores / p.processes), p.gemm_gflops, p.memory_gbs,
                  (long long)p.processes, p.link.bandwidth_gbs, p.link.latency_us);
    out += buf;
  }
  if (!p.model_rates.empty()) {
    const bool gpu = p.device == "cuda";
    out += str_cat("the model forward and backward (", p.measured_model,
                   "), GFLOP/s of a block | of the embedding, head and loss; a later micro-batch: the milliseconds "
                   "a step's later micro-batch takes beyond its first, a block | the rest",
                   gpu ? "; the host: the milliseconds it takes to queue their kernels, a block | the rest" : "",
                   ":\n");
    std::snprintf(buf, sizeof(buf), "%24s  %19s  %19s  %19s  %23s%s\n", "tokens per micro-batch", "recompute none",
                  "selective", "full", "a later micro-batch", gpu ? "             the host" : "");
    out += buf;
    std::vector<double> sizes;
    for (const auto& r : p.model_rates)
      if (std::find(sizes.begin(), sizes.end(), r.tokens) == sizes.end()) sizes.push_back(r.tokens);
    std::sort(sizes.begin(), sizes.end());
    auto measured = [&](double tokens, const std::string& mode) -> const AchievedRate* {
      const auto r = std::find_if(p.model_rates.begin(), p.model_rates.end(),
                                  [&](const AchievedRate& a) { return a.tokens == tokens && a.recompute == mode; });
      return r == p.model_rates.end() ? nullptr : &*r;
    };
    for (double tokens : sizes) {
      std::snprintf(buf, sizeof(buf), "  %22.0f", tokens);
      out += buf;
      for (const char* mode : {"none", "selective", "full"}) {
        if (const AchievedRate* r = measured(tokens, mode))
          std::snprintf(buf, sizeof(buf), "  %9.0f | %7.0f", r->block_flops * 1e-9, r->head_flops * 1e-9);
        else
          std::snprintf(buf, sizeof(buf), "  %19s", "-");
        out += buf;
      }
      if (const AchievedRate* r = measured(tokens, "none")) {
        std::snprintf(buf, sizeof(buf), "  %11.3f | %7.3f", r->block_later_s * 1e3, r->head_later_s * 1e3);
        out += buf;
        if (gpu) {
          std::snprintf(buf, sizeof(buf), "  %9.3f | %7.3f", r->block_host_s * 1e3, r->head_host_s * 1e3);
          out += buf;
        }
      }
      out += "\n";
    }
    std::snprintf(buf, sizeof(buf), "a training step besides the model: %.2f ms, and %.3f ns per parameter updated\n",
                  p.step_fixed_s * 1e3, p.optimizer_s_per_parameter * 1e9);
    out += buf;
  }
  for (const auto& c : p.collectives) {
    std::snprintf(buf, sizeof(buf), "  %-15s %10.0f bytes %10.1f us\n", c.op.c_str(), c.bytes, c.seconds * 1e6);
    out += buf;
  }
  return out;
}

ModelSplit split_model_runs(double one_block_s, double three_blocks_s, double rest_without_recompute) {
  if (rest_without_recompute <= 0) {
    const double block_s = (three_blocks_s - one_block_s) / 2;
    return {block_s, one_block_s - block_s};
  }
  const double r = rest_without_recompute;
  return {((one_block_s - r) + 3 * (three_blocks_s - r)) / 10, r};
}

namespace {

// Where a process of tc's run computes: its GPU (train.device = "cuda"; the products in the
// precision's dtype, the model under autocast), else the CPU in f32.
struct Target {
  bool gpu = false;
  DType dtype = DType::f32;
};

Target target_of(const io::TrainConfig& tc) {
  Target t;
  t.gpu = tc.train.device == "cuda";
  if (t.gpu) t.dtype = tc.train.precision == "bf16" ? DType::bf16 : tc.train.precision == "f16" ? DType::f16 : DType::f32;
  return t;
}

// Each of `batches` in turn, until `budget` seconds have passed (each at least 3 times, after a
// warm-up), every batch followed on a GPU by a wait for it: per batch, the median seconds it took
// (a shared machine's bursts of other work land in the tails) whole and the host's part of them
// (until its last kernel was queued; on the CPU the whole).
// A batch of several runs queues them back to back, as a step queues its micro-batches: the host
// runs ahead of the GPU (a wait after each run would add the GPU's idle start to every one). Taking
// the batches in turn keeps a drift in the machine's pace (a shared CPU's clock, which sets the
// pace of launch-bound runs) out of the differences between them.
struct BatchTimes {
  double total_s = 0, host_s = 0;
};
std::vector<BatchTimes> time_in_turn(const Target& t, const std::vector<std::function<void()>>& batches,
                                     double budget) {
  for (const auto& batch : batches) batch();
  if (t.gpu) cuda::synchronize();
  std::vector<std::vector<double>> total(batches.size()), host(batches.size());
  const auto start = Clock::now();
  auto seconds_since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  do {
    for (size_t b = 0; b < batches.size(); ++b) {
      const auto t0 = Clock::now();
      batches[b]();
      host[b].push_back(seconds_since(t0));
      if (t.gpu) cuda::synchronize();
      total[b].push_back(seconds_since(t0));
    }
  } while (total[0].size() < 3 || seconds_since(start) < budget);
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::vector<BatchTimes> out;
  for (size_t b = 0; b < batches.size(); ++b) out.push_back({median(total[b]), median(host[b])});
  return out;
}
constexpr int kQueuedRuns = 4;  // runs in a batch

// The median seconds of f followed on a GPU by a wait for it, as time_in_turn takes them.
double seconds_per_run(const Target& t, const std::function<void()>& f, double budget) {
  return time_in_turn(t, {f}, budget)[0].total_s;
}

models::GPT::Recompute recompute_mode(const std::string& name) {
  return name == "full" ? models::GPT::Recompute::full
         : name == "selective" ? models::GPT::Recompute::selective
                               : models::GPT::Recompute::none;
}

Device device_of(const Target& target) { return target.gpu ? Device::cuda(cuda::current_device()) : Device::cpu(); }

// Token ids 0..vocab-1 in a fixed scramble, `n` of them.
std::vector<int64_t> scrambled_ids(size_t n, int64_t vocab) {
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = int64_t(i * 7919 % size_t(vocab));
  return ids;
}

// Seconds per run of the model as a step's first micro-batch (its gradients alone) and, where
// measured, as a later one (train/parallel_runner.cpp: its gradients added into the previous
// runs', and under autocast the first run's casts of the weights reused); the host's part of a
// run (on a GPU; 0 on the CPU); the FLOPs its ops count.
struct ModelRuns {
  double first_s = 0, later_s = 0, host_s = 0, flops = 0;
};

// The model at tc's shapes with some blocks, forward and backward on `rows` sequences on the
// target's device under a recomputation mode, in the batches time_in_turn takes.
class ModelUnderTest {
 public:
  ModelUnderTest(const io::TrainConfig& tc, const Target& target, int64_t vocab, int64_t layers, int64_t rows,
                 const std::string& recompute)
      : device_(device_of(target)), low_(target.dtype) {
    models::GPTConfig c = train::gpt_config(tc, vocab);
    c.n_layer = layers;
    c.dropout = 0;
    gpt_ = std::make_unique<models::GPT>(c, 7);
    gpt_->set_recompute(recompute_mode(recompute));
    gpt_->to(device_);
    tokens_ = to_device(
        from_vector<int64_t>(scrambled_ids(size_t(rows * c.block_size), c.vocab_size), {rows, c.block_size}), device_);
  }

  double counted_flops() {
    OpCounts counts;
    OpCountScope scope(counts);
    first_run();
    return counts.flops();
  }
  // Runs as a step's first micro-batch each, back to back.
  void firsts() {
    for (int i = 0; i < kQueuedRuns; ++i) first_run();
  }
  // One step's micro-batches: the first, then later ones sharing its casts.
  void step() {
    gpt_->zero_grad();
    std::optional<autograd::CastCache> casts;
    if (autocast()) casts.emplace(gpt_->parameters());
    for (int i = 0; i < kQueuedRuns; ++i) forward_backward();
  }
  void first_run() {
    gpt_->zero_grad();
    forward_backward();
  }

 private:
  bool autocast() const { return low_ != DType::f32; }
  void forward_backward() {
    Tensor loss;
    {
      amp::AutocastGuard guard(device_.type, autocast() ? low_ : DType::bf16, autocast());
      loss = gpt_->loss(tokens_, tokens_);
    }
    loss.backward();
  }

  Device device_;
  DType low_;  // the autocast dtype; f32: no autocast
  std::unique_ptr<models::GPT> gpt_;
  Tensor tokens_;
};

// The model with 1 block and with 3 (their difference is blocks), as above, all timed in turn so
// that a drift of the machine's pace stays out of the differences; `later` times a step's later
// micro-batches too. The host's part is that of a run on its own: queued behind others, a run's
// launches can wait for room in the GPU's queue, which is the GPU's time, not the host's.
std::pair<ModelRuns, ModelRuns> time_models(const io::TrainConfig& tc, const Target& target, int64_t vocab,
                                            int64_t rows, const std::string& recompute, bool later) {
  ModelUnderTest one(tc, target, vocab, 1, rows, recompute), three(tc, target, vocab, 3, rows, recompute);
  ModelRuns a, b;
  a.flops = one.counted_flops();
  b.flops = three.counted_flops();
  std::vector<std::function<void()>> batches = {[&] { one.firsts(); }, [&] { three.firsts(); }};
  if (target.gpu) batches.insert(batches.end(), {[&] { one.first_run(); }, [&] { three.first_run(); }});
  if (later) batches.insert(batches.end(), {[&] { one.step(); }, [&] { three.step(); }});
  const double budget = (target.gpu ? 0.3 : 0.15) * double(batches.size()) / 2;
  const std::vector<BatchTimes> times = time_in_turn(target, batches, budget);
  size_t next = 0;
  for (ModelRuns* r : {&a, &b}) r->first_s = times[next++].total_s / kQueuedRuns;
  if (target.gpu)
    for (ModelRuns* r : {&a, &b}) r->host_s = times[next++].host_s;
  // A step is a first run and kQueuedRuns - 1 later ones.
  if (later)
    for (ModelRuns* r : {&a, &b})
      r->later_s = r->first_s + (times[next++].total_s - kQueuedRuns * r->first_s) / (kQueuedRuns - 1);
  return {a, b};
}

// trireme's own training step (train/step_runner.h) of tc's model with `layers` blocks on `rows`
// sequences, one process, no recomputation: seconds per step, and the parameters it updates.
std::pair<double, double> time_training_step(const io::TrainConfig& tc, const Target& target, int64_t vocab,
                                             int64_t layers, int64_t rows) {
  io::TrainConfig c = tc;
  c.model.n_layer = layers;
  c.train.batch_size = rows;
  c.parallel = io::ParallelConfig{};
  c.parallel.schedule = tc.parallel.schedule;
  c.parallel.auto_layout = false;
  c.memory.recompute = "none";
  auto runner = train::make_step_runner(c, vocab, train::ParallelJob::single(c.parallel, device_of(target)));
  runner->set_lr(c.optim.lr);
  std::vector<int32_t> tokens;
  for (int64_t id : scrambled_ids(size_t((rows + 1) * (c.model.block_size + 1)), vocab)) tokens.push_back(int32_t(id));
  const io::DataLoader loader(std::move(tokens), c.model.block_size, 1);
  int64_t step = 0;
  const double s =
      seconds_per_run(target, [&] { (void)runner->train_step(step++, loader); }, target.gpu ? 0.3 : 0.15);
  return {s, double(runner->num_parameters())};
}

// The model itself at micro-batches of one to `batch / world` sequences (halving; fewer when a
// step would take long), under each recomputation mode, in every process at once (`together`
// waits for the others): one block and three, half the difference being a block. Then the
// training step at the largest size, one block and three, for what it costs besides the model.
// Sets p's model_rates, measured_model, step_fixed_s and optimizer_s_per_parameter.
void measure_model(const io::TrainConfig& tc, const Target& target, int64_t vocab, int64_t world,
                   const std::function<void()>& together, MachineProfile& p) {
  const int64_t V = train::vocab_or_assumed(tc, vocab);
  const int64_t T = tc.model.block_size;
  int64_t largest = std::max<int64_t>(1, tc.train.batch_size / world);
  const int64_t max_rows = target.gpu ? 16384 : 2048;
  while (largest > 1 && largest * T > max_rows) largest /= 2;
  std::vector<int64_t> sizes;  // sequences per micro-batch
  for (int64_t s = largest; s >= 1 && sizes.size() < (target.gpu ? 5u : 3u); s /= 2) sizes.push_back(s);

  // Per size, the FLOPs of a block and of the rest (embedding, head, loss) without recomputation
  // (a replay's are inside its mode's rate); per mode and size, the seconds they took.
  std::vector<std::pair<double, double>> flops(sizes.size());
  std::map<std::string, std::vector<std::pair<double, double>>> seconds;  // sizes as in `sizes`, largest first
  std::vector<ModelSplit> later(sizes.size());  // per size, a step's later micro-batch beyond its first
  std::vector<ModelSplit> host(sizes.size());   // per size, the host's part of a run
  double model_1 = 0, model_3 = 0;  // the largest size without recomputation, for the step below
  for (size_t i = 0; i < sizes.size(); ++i) {
    double rest_s = 0;  // the embedding, head and loss without recomputation, also theirs with it
    for (const char* mode : {"none", "selective", "full"}) {
      const bool none = std::string(mode) == "none";  // the later micro-batches and the host: without recomputation
      together();
      const auto [one, three] = time_models(tc, target, V, sizes[i], mode, none);
      const double t1 = one.first_s, t3 = three.first_s;
      if (none) {
        flops[i] = {(three.flops - one.flops) / 2, one.flops - (three.flops - one.flops) / 2};
        if (i == 0) model_1 = t1, model_3 = t3;
        later[i] = split_model_runs(one.later_s - t1, three.later_s - t3);
        host[i] = split_model_runs(one.host_s, three.host_s);
      }
      const ModelSplit split = split_model_runs(t1, t3, none ? 0 : rest_s);
      if (none) rest_s = split.rest_s;
      seconds[mode].push_back({split.block_s, split.rest_s});
    }
  }
  p.model_rates.clear();
  for (auto& [mode, runs] : seconds) {
    for (size_t i = 0; i < runs.size(); ++i) {
      auto& [block_s, head_s] = runs[i];
      // A smaller micro-batch takes no longer than a larger one: where the timing says otherwise
      // (launch-bound sizes, noise), the larger one's time.
      if (i > 0 && runs[i - 1].first > 0) block_s = std::min(block_s, runs[i - 1].first);
      if (i > 0 && runs[i - 1].second > 0) head_s = std::min(head_s, runs[i - 1].second);
      const auto [block_f, head_f] = flops[i];
      if (block_s <= 0 || head_s <= 0 || block_f <= 0 || head_f <= 0) continue;  // too noisy to use
      AchievedRate r{mode, double(sizes[i] * T), block_f / block_s, head_f / head_s};
      if (mode == "none") {
        r.block_later_s = later[i].block_s, r.head_later_s = later[i].rest_s;
        r.block_host_s = std::max(0.0, host[i].block_s), r.head_host_s = std::max(0.0, host[i].rest_s);
      }
      p.model_rates.push_back(r);
    }
  }
  together();
  const auto [s1, p1] = time_training_step(tc, target, V, 1, largest);
  together();
  const auto [s3, p3] = time_training_step(tc, target, V, 3, largest);
  together();
  // Besides the model: a + b x parameters, from the two sizes.
  const double o1 = std::max(0.0, s1 - model_1), o3 = std::max(0.0, s3 - model_3);
  const double per_parameter = p3 > p1 ? std::max(0.0, (o3 - o1) / (p3 - p1)) : 0;
  p.step_fixed_s = std::max(0.0, o1 - per_parameter * p1);
  p.optimizer_s_per_parameter = per_parameter;
  p.measured_model = str_cat("d_model=", tc.model.d_model, " n_head=", tc.model.n_head, " block_size=", T, " vocab=", V,
                             target.gpu ? str_cat(" ", dtype_name(target.dtype), " on a GPU") : "");
}

}  // namespace

MachineProfile calibrate_machine(const io::TrainConfig& tc, int64_t vocab, const std::string& path,
                                 const std::vector<std::string>& worker_args) {
  const Target target = target_of(tc);
  MachineProfile p;
  p.device = target.gpu ? "cuda" : "cpu";
  p.dtype = dtype_name(target.dtype);
  p.cores = runtime::available_cpus();
  p.processes = kCalibrationProcesses;
  if (target.gpu) {
    const int gpus = cuda::device_count();
    if (gpus == 0)
      throw io::ConfigError(str_cat("plan --calibrate: train.device = \"cuda\", but ", cuda::unavailable_reason()));
    p.processes = std::min<int64_t>(kCalibrationProcesses, gpus);
    cuda::set_device(0);
  }
  p.fingerprint = machine_fingerprint(p.device);
  {
    ThreadsFor threads(int(std::max<int64_t>(1, p.cores / p.processes)));
    // The block's products at one micro-batch of the model, fewer rows when they would take long
    // on the CPU.
    const int64_t d = tc.model.d_model;
    int64_t rows = std::min<int64_t>(tc.train.batch_size * tc.model.block_size, target.gpu ? 16384 : 4096);
    while (!target.gpu && rows > 64 && 2.0 * double(rows) * double(d) * double(4 * d) > 4e9) rows /= 2;
    const Device device = target.gpu ? Device::cuda(0) : Device::cpu();
    Generator gen(1);
    auto made = [&](const Shape& shape) { return to_device(to_dtype(randn(shape, gen), target.dtype), device); };
    const Tensor x = made({rows, d}), h = made({rows, 4 * d});
    const Tensor w_qkv = made({d, 3 * d}), w_fc = made({d, 4 * d}), w_proj = made({4 * d, d});
    const double flops = 2.0 * double(rows) * double(d) * double(3 * d + 4 * d + 4 * d);
    const double s = seconds_per_run(
        target, [&] { (void)matmul(x, w_qkv), (void)matmul(x, w_fc), (void)matmul(h, w_proj); }, 0.5);
    p.gemm_gflops = flops / s / 1e9;
    // A large f32 add: 3 x 32 MiB on the CPU, 3 x 1 GiB on a GPU (its caches hold tens of MiB).
    const int64_t n = target.gpu ? int64_t(1) << 28 : int64_t(1) << 23;
    const Tensor a = target.gpu ? zeros({n}, DType::f32, device) : randn({n}, gen);
    const Tensor b = target.gpu ? zeros({n}, DType::f32, device) : randn({n}, gen);
    p.memory_gbs = 3.0 * 4 * double(n) / seconds_per_run(target, [&] { (void)add(a, b); }, 0.3) / 1e9;
  }
  if (p.processes == 1) {  // one GPU: the model alone, no collectives to measure
    measure_model(tc, target, vocab, 1, [] {}, p);
    save_profile(path, p);
    return p;
  }
  // The model and the collectives: two processes of this program at once, as a 2-process run.
  const fs::path dir = fs::temp_directory_path() / str_cat("trireme_calibrate_", ::getpid());
  fs::create_directories(dir);
  const std::string samples = (dir / "collectives.json").string();
  dist::LaunchOptions launch;
  launch.nproc_per_node = int(p.processes);
  launch.log_dir = (dir / "logs").string();
  launch.echo = false;
  launch.command = {self_exe(), "plan", "--calibrate-worker", samples};
  launch.command.insert(launch.command.end(), worker_args.begin(), worker_args.end());
  const dist::LaunchResult r = dist::launch(launch);
  if (r.exit_code != 0) {
    throw Error(
        str_cat("plan --calibrate: the calibration's processes failed: ", r.message, " (logs in ", r.log_dir, ")"));
  }
  const nlohmann::json j = nlohmann::json::parse(io::read_file(samples));
  for (const auto& c : j.at("collectives")) p.collectives.push_back({c.at("op"), c.at("bytes"), c.at("seconds")});
  take_model_figures(j, p);
  fs::remove_all(dir);
  // Ring all-reduce over 2: one message of the whole buffer each way at once.
  const auto [latency, per_byte] = fit_line(p.collectives, "all_reduce");
  const double p2 = double(p.processes);
  p.link.bandwidth_gbs = per_byte > 0 ? 2 * (p2 - 1) / p2 / per_byte / 1e9 : 1;
  p.link.latency_us = latency / (2 * (p2 - 1)) * 1e6;
  save_profile(path, p);
  return p;
}

int calibrate_worker(const std::string& out_path, const io::TrainConfig& tc, int64_t vocab) {
  const dist::DistEnv env = dist::dist_env_from_environment();
  const Target target = target_of(tc);
  if (target.gpu) cuda::set_device(env.local_rank);  // a GPU per process, as a run has
  auto store = std::make_shared<dist::StoreClient>(dist::store_client_options(env));
  auto pg = dist::make_process_group(target.gpu ? "nccl" : "gloo", store, env.rank, env.world_size,
                                     {.device = target.gpu ? env.local_rank : -1});
  const int64_t world = env.world_size;
  nlohmann::json result;
  {
    ThreadsFor threads(int(std::max<int64_t>(1, runtime::available_cpus() / world)));
    MachineProfile measured;
    measure_model(tc, target, vocab, world, [&] { pg->barrier()->wait(); }, measured);
    put_model_figures(result, measured);
  }

  const Device device = target.gpu ? Device::cuda(env.local_rank) : Device::cpu();
  nlohmann::json out = nlohmann::json::array();
  for (int64_t elements : {int64_t(1) << 10, int64_t(1) << 14, int64_t(1) << 18, int64_t(1) << 21}) {
    const double bytes = 4.0 * double(elements);
    Tensor full = zeros({elements}, DType::f32, device), chunk = zeros({elements / world}, DType::f32, device);
    // A fixed count, the same on every rank (a time budget would let the ranks disagree on it).
    const int runs = elements >= (int64_t(1) << 21) ? 5 : 20;
    auto timed = [&](const std::string& op, auto&& f) {
      pg->barrier()->wait();
      f();  // a warm-up
      if (target.gpu) cuda::synchronize();
      const auto start = Clock::now();
      for (int i = 0; i < runs; ++i) f();
      if (target.gpu) cuda::synchronize();
      const double s = std::chrono::duration<double>(Clock::now() - start).count() / runs;
      // Every rank times the same sequence; rank 0's figure is kept.
      out.push_back({{"op", op}, {"bytes", bytes}, {"seconds", s}});
    };
    timed("all_reduce", [&] { pg->all_reduce(full)->wait(); });
    timed("reduce_scatter", [&] { pg->reduce_scatter(chunk, full)->wait(); });
    timed("all_gather", [&] { pg->all_gather(full, chunk)->wait(); });
    if (world >= 2) {
      // Ping-pong between ranks 0 and 1: half a round trip per message.
      timed("send_recv", [&] {
        if (env.rank == 0)
          pg->send(full, 1)->wait(), pg->recv(full, 1)->wait();
        else if (env.rank == 1)
          pg->recv(full, 0)->wait(), pg->send(full, 0)->wait();
      });
      out.back()["seconds"] = out.back()["seconds"].get<double>() / 2;
    }
  }
  pg->barrier()->wait();
  result["collectives"] = out;
  if (env.rank == 0) io::write_file_atomic(out_path, result.dump(2));
  return 0;
}

}  // namespace trireme::plan
