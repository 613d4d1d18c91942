// Calibration of this machine for the planner: GEMM throughput at the shapes the model runs,
// memory bandwidth, and the collectives (all-reduce, reduce-scatter, all-gather, send/recv)
// between 2 processes over a few message sizes; saved as a profile keyed by a fingerprint of the
// machine and reused while it matches. On the CPU (train.device = "cpu") the processes share the
// cores and talk over Gloo; the fingerprint is the CPU model, cores, trireme, OpenBLAS and Gloo
// versions. On GPUs (train.device = "cuda") each process has a GPU, the GEMMs and the model run in
// the config's precision, the collectives are NCCL's (with one GPU there are none to measure);
// the fingerprint is the GPUs, the driver, CUDA, cuBLASLt, NCCL and trireme versions.
//
//   MachineProfile p = calibrate_machine(tc, vocab, path, args);  // measures (well under a minute), saves
//   auto q = load_profile(path, true);                       // io::ConfigError if from another machine
//   ClusterSpec c = this_machine_cluster(2); apply_profile(c, *q, 2);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trireme/io/config.h"
#include "trireme/plan/cluster.h"

namespace trireme::plan {

struct CollectiveSample {
  std::string op;  // "all_reduce", "reduce_scatter", "all_gather", "send_recv"
  double bytes = 0, seconds = 0;
};

struct MachineProfile {
  std::string device = "cpu";  // "cpu": processes sharing this machine's cores; "cuda": a GPU each
  std::string dtype = "f32";   // the GEMMs' dtype ("f32", "bf16", "f16"), the model's precision
  std::string fingerprint;
  int64_t cores = 0;
  int64_t processes = 2;   // the calibration's processes, each with cores / processes threads
  double gemm_gflops = 0;  // per process, the model's products at one micro-batch's shapes
  double memory_gbs = 0;   // per process, a large elementwise add
  // Per process, the model itself forward and backward, memory-bound ops included: for each
  // recomputation mode and micro-batch size measured, its counted FLOPs (without recomputation)
  // over the time a decoder block, and the embedding, head and loss, took.
  std::vector<AchievedRate> model_rates;
  std::string measured_model;  // "d_model=128 n_head=4 block_size=64 vocab=256"
  // What a training step (trireme's own step, as `train` runs it) costs besides that: fixed, and
  // per parameter (the gradient clipping and the optimizer).
  double step_fixed_s = 0, optimizer_s_per_parameter = 0;
  LinkSpec link;               // fitted to the all-reduce samples (ring: 2 (p-1)/p bytes / bw + latency)
  std::vector<CollectiveSample> collectives;
};

// The device kind a run of tc computes on, as profiles name it: "cuda" or "cpu".
inline std::string profile_device(const io::TrainConfig& tc) { return tc.train.device == "cuda" ? "cuda" : "cpu"; }

// "cpu=...; cores=N; trireme=...; openblas=...; gloo=..." for "cpu"; for "cuda"
// "gpus=[...]; driver=...; cuda=...; cublaslt=...; nccl=...; trireme=...".
std::string machine_fingerprint(const std::string& device = "cpu");
// $TRIREME_CACHE_DIR, else $XDG_CACHE_HOME/trireme, else ~/.cache/trireme: plan_profile.json,
// plan_profile_cuda.json for GPUs.
std::string default_profile_path(const std::string& device = "cpu");

// The profile at `path`, measured for `device`; nullopt when there is none and it is not
// `required`. A profile of another machine or device kind (or unreadable) is refused with
// io::ConfigError saying why and what to run.
std::optional<MachineProfile> load_profile(const std::string& path, bool required, const std::string& device = "cpu");
void save_profile(const std::string& path, const MachineProfile& p);
// The profile's measured figures in place of this machine's defaults, for `processes` processes.
void apply_profile(ClusterSpec& c, const MachineProfile& p, int64_t processes);
std::string describe_profile(const MachineProfile& p);

// Seconds of one decoder block and of the rest of the model (embedding, head, loss) per run, from
// runs of the model with one block and with three.
struct ModelSplit {
  double block_s = 0, rest_s = 0;
};
// Without recomputation (`rest_without_recompute` <= 0): half the difference of the two runs is a
// block. A recomputation mode replays blocks only, so its rest is the one measured without: the
// block is then the least-squares fit of t - rest = blocks x block_s over both runs, which stays
// positive where a difference of two noisy runs of small micro-batches may not.
ModelSplit split_model_runs(double one_block_s, double three_blocks_s, double rest_without_recompute = 0);

// Measures this machine (its CPU or its GPUs, as tc.train.device says) for tc's model and saves the
// profile at `path`. The model's timing and the collectives run in 2 processes at once (1 on a
// machine with one GPU), started through the launcher as this program's
// `plan --calibrate-worker OUT` followed by `worker_args` (what gives the workers tc: --config,
// --set and --vocab).
MachineProfile calibrate_machine(const io::TrainConfig& tc, int64_t vocab, const std::string& path,
                                 const std::vector<std::string>& worker_args);
// One of those processes; rank 0 writes what they measured to `out_path` as JSON.
int calibrate_worker(const std::string& out_path, const io::TrainConfig& tc, int64_t vocab);

}  // namespace trireme::plan
