// The launcher behind `trireme launch`: starts one worker process per local rank with the
// torchrun-style environment, hosts the job's store, prefixes and logs their output, and ends
// the whole group as soon as one worker fails, naming it.
//
//   trireme launch --nproc-per-node 4 -- ./train --config gpt.json
//
//   LaunchOptions options = launch_parse_args({"--nproc-per-node", "4", "--", "./train"});
//   return launch_main(options);   // the exit code for the CLI to return
//
// What the workers get: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (the node),
// MASTER_ADDR, MASTER_PORT (the store), TRIREME_STORE_TOKEN (the job's secret),
// TRIREME_RESTART_COUNT (and TORCHELASTIC_RESTART_COUNT), and OMP_NUM_THREADS /
// OPENBLAS_NUM_THREADS = the CPUs this launcher may use divided among the local workers (an
// OMP_NUM_THREADS already set is passed through: it is read as the per-worker choice), and
// NCCL_NVLS_ENABLE=0 unless the launcher's environment sets it (NVLS off: see launcher.cpp).
//
// Failure handling: when a worker exits non-zero or is killed by a signal, the others get
// SIGTERM, then SIGKILL after the grace period (each worker runs in its own process group, so
// whatever it started goes too); the launcher prints which rank failed, how, and the tail of
// its log, and returns non-zero (the worker's exit code, or 128 + the signal). Ctrl-C (SIGINT)
// or SIGTERM to the launcher stops everything the same way. With max_restarts N, a failed group
// is restarted up to N times (the store is cleared in between). Even when the launcher itself is
// killed with SIGKILL, a small watchdog process it started kills every worker's process group,
// so no worker or anything a worker started is left behind (Note [no orphans] in launcher.cpp).
// A program that cannot be executed fails its rank with "exec 'PROGRAM' failed: <reason>".
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace trireme::dist {

struct LaunchOptions {
  int nnodes = 1;                      // --nnodes
  int nproc_per_node = 1;              // --nproc-per-node
  int node_rank = 0;                   // --node-rank (node 0 hosts the store)
  std::string master_addr = "127.0.0.1";  // --master-addr: where the store is
  int master_port = 0;                 // --master-port; 0 picks a free one (one node only)
  int max_restarts = 0;                // --max-restarts
  std::string log_dir;                 // --log-dir: rank_<r>.log per rank; empty: a new temp folder
  std::vector<std::string> command;    // after "--": PROGRAM ARGS (PROGRAM is looked up in PATH)

  // Not torchrun flags, but settable (--store-host, --token, --grace-ms):
  std::string store_host;              // store's listening address; empty: 127.0.0.1 (one node) or 0.0.0.0
  std::string token;                   // empty: random for one node, $TRIREME_STORE_TOKEN for several
  std::chrono::milliseconds grace{5000};  // SIGTERM -> SIGKILL
  int tail_lines = 20;                 // lines of the failed rank's log shown in the message
  bool echo = true;                    // copy workers' output to the console, prefixed "[rank r] "
};

struct LaunchResult {
  int exit_code = 0;        // 0 when every worker of the last attempt exited 0
  int failed_rank = -1;     // the global rank that failed first (-1: none, or interrupted)
  std::string message;      // what launch_main prints on failure
  int restarts = 0;         // how many times the group was restarted
  std::string log_dir;
};

// Runs the job to the end and reports how it went (prints only the workers' output).
LaunchResult launch(const LaunchOptions& options);

// launch(), printing failure messages to stderr; returns the exit code.
int launch_main(const LaunchOptions& options);

// Bounds launch_validate enforces.
inline constexpr int kMaxNodes = 1 << 16;
inline constexpr int kMaxProcPerNode = 1024;

// Throws trireme::Error naming the flag when an option is out of range (a negative --grace-ms,
// --node-rank outside --nnodes, no program, ...). launch() and launch_parse_args() call it.
void launch_validate(const LaunchOptions& options);

// Parses the torchrun-style flags (both "--flag value" and "--flag=value"; underscores work
// as dashes: --nproc_per_node). Everything after "--" (or from the first argument that is not
// a flag) is the command. Throws trireme::Error on an unknown flag or a bad value (the CLI
// exits 2).
LaunchOptions launch_parse_args(const std::vector<std::string>& args);

// The help text for `trireme launch --help`.
const char* launch_usage();

}  // namespace trireme::dist
