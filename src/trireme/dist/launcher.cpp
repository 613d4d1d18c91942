// The launcher: spawn workers with the rank environment, watch them, stop all on the first
// failure (SIGTERM, then SIGKILL), relay their output with rank prefixes, restart on request.
#include "trireme/dist/launcher.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "trireme/core/checked.h"
#include "trireme/core/error.h"
#include "trireme/dist/store.h"

extern char** environ;

namespace trireme::dist {

namespace {

using std::chrono::milliseconds;
using LaunchClock = std::chrono::steady_clock;

// ---- signals: SIGINT/SIGTERM/SIGHUP to the launcher wake its loop through a pipe.
std::atomic<int> g_signal{0};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  g_signal = sig;
  char c = 1;
  [[maybe_unused]] ssize_t ignored = ::write(g_signal_pipe[1], &c, 1);
}

class SignalGuard {
 public:
  SignalGuard() {
    g_signal = 0;
    TRIREME_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "launch: pipe failed: ", std::strerror(errno));
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

// ---- Note [no orphans]
// Each worker leads its own process group, so killpg reaches whatever it started, and has
// PR_SET_PDEATHSIG so it dies with the launcher. Its children do not get that signal, and a
// launcher killed with SIGKILL cannot killpg anything: the watchdog does. It is a process forked
// when the launch starts that holds the read end of a pipe and is told each worker's group; when
// the pipe reaches end-of-file without a "done" (the launcher died, however), it SIGKILLs every
// group it was told about. The launcher is also a child subreaper, so a worker's children that
// outlive it are re-parented to the launcher (not to init) and are reaped when the group stops.
class Watchdog {
 public:
  static constexpr int kMaxGroups = 4096;

  Watchdog() {
    int fds[2];
    TRIREME_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe failed: ", std::strerror(errno));
    pid_t pid = ::fork();
    if (pid < 0) {
      int err = errno;
      ::close(fds[0]);
      ::close(fds[1]);
      TRIREME_FAIL("launch: fork failed: ", std::strerror(err));
    }
    if (pid == 0) run(fds[0]);  // never returns
    ::close(fds[0]);
    fd_ = fds[1];
    pid_ = pid;
  }

  ~Watchdog() {
    send(0);  // done: nothing to kill
    ::close(fd_);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(pid_t group) { send(group); }
  void forget(pid_t group) { send(-group); }

 private:
  void send(int32_t record) {
    // 4 bytes to a pipe are written whole; the watchdog reads as fast as workers are spawned.
    while (::write(fd_, &record, sizeof(record)) < 0 && errno == EINTR) {
    }
  }

  // In the forked child of a possibly multi-threaded process: async-signal-safe calls only.
  [[noreturn]] static void run(int read_fd) {
    ::prctl(PR_SET_NAME, "trireme-watch");
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    // A Ctrl-C or SIGTERM meant for the launcher must not take its safety net away.
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Hold no descriptor of the launcher's (its store's port, pipes others wait on) but the pipe.
    if (read_fd != 3) {
      ::dup2(read_fd, 3);
      ::close(read_fd);
    }
    ::close_range(4, ~0u, 0);
    pid_t groups[kMaxGroups];
    int count = 0;
    while (true) {
      int32_t record = 0;
      ssize_t n = ::read(3, &record, sizeof(record));
      if (n < 0 && errno == EINTR) continue;
      if (n == static_cast<ssize_t>(sizeof(record))) {
        if (record == 0) ::_exit(0);
        if (record > 0 && count < kMaxGroups) groups[count++] = record;
        for (int i = 0; record < 0 && i < count; ++i)
          if (groups[i] == -record) groups[i--] = groups[--count];
        continue;
      }
      for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);  // the launcher is gone
      ::_exit(0);
    }
  }

  int fd_ = -1;
  pid_t pid_ = -1;
};

// ---- one worker process and its output.
struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  int out_fd = -1;  // its stdout, then stderr, through pipes
  int err_fd = -1;
  int log_fd = -1;
  std::string out_partial, err_partial;  // a line not yet ended by '\n'
  std::deque<std::string> tail;
  bool exited = false;
  bool forgotten = false;  // its group is dead and reaped: the watchdog no longer guards it
  int status = 0;
  std::string log_path;
};

// Finds PROGRAM in PATH before forking (the child should only exec).
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  TRIREME_FAIL("launch: program '", program, "' not found in PATH");
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

class Group {
 public:
  Group(const LaunchOptions& options, const std::string& token, int port, int attempt, const std::string& log_dir,
        Watchdog& watchdog)
      : options_(options), watchdog_(watchdog) {
    std::string program = resolve_program(options.command[0]);
    const char* omp = std::getenv("OMP_NUM_THREADS");
    std::string threads = omp && *omp ? omp : std::to_string(std::max(1, available_cpus() / options.nproc_per_node));
    int world = options.nnodes * options.nproc_per_node;
    for (int local = 0; local < options.nproc_per_node; ++local) {
      Worker& w = workers_.emplace_back();
      w.local_rank = local;
      w.rank = options.node_rank * options.nproc_per_node + local;
      w.log_path = log_dir + "/rank_" + std::to_string(w.rank) + ".log";
      std::vector<std::pair<std::string, std::string>> vars = {
          {"RANK", std::to_string(w.rank)},
          {"LOCAL_RANK", std::to_string(local)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
          {"GROUP_RANK", std::to_string(options.node_rank)},
          {"MASTER_ADDR", options.master_addr},
          {"MASTER_PORT", std::to_string(port)},
          {kStoreTokenEnv, token},
          {"TRIREME_RESTART_COUNT", std::to_string(attempt)},
          {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
          {"OMP_NUM_THREADS", threads},
          {"OPENBLAS_NUM_THREADS", threads},
      };
      // NCCL's NVLink SHARP (NVLS) algorithms use NVLink multicast, which can put a shared host's
      // GPUs out of service after a crash; its ring and tree algorithms do without. A value the
      // user set is passed through.
      if (!std::getenv("NCCL_NVLS_ENABLE")) vars.emplace_back("NCCL_NVLS_ENABLE", "0");
      spawn(w, program, vars, attempt);
    }
  }

  ~Group() {
    stop_all();  // no-op when everything has exited; never leaves a worker behind
    for (auto& w : workers_) {
      for (int* fd : {&w.out_fd, &w.err_fd, &w.log_fd})
        if (*fd >= 0) ::close(*fd), *fd = -1;
    }
  }

  // Runs until all exit 0 (nullptr), a worker fails (that worker), or a signal arrives
  // (nullptr with *signal set).
  const Worker* watch(int* signal) {
    while (true) {
      pump(milliseconds(20));
      if (int sig = g_signal.load()) {
        *signal = sig;
        stop_all();
        return nullptr;
      }
      reap();
      const auto failed_now = [](const Worker& w) {
        return w.exited && !(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0);
      };
      if (std::any_of(workers_.begin(), workers_.end(), failed_now)) {
        // A peer that notices a killed rank's closed socket can exit before the kernel has
        // finished tearing the killed one down: look again a moment later before blaming.
        pump(milliseconds(100));
        reap();
      }
      // Of several failures seen at once, blame one killed by a signal first: the others most
      // likely failed because it went away.
      const Worker* failed = nullptr;
      for (const auto& w : workers_) {
        if (!w.exited || (WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0)) continue;
        if (!failed || (WIFSIGNALED(w.status) && !WIFSIGNALED(failed->status))) failed = &w;
      }
      if (failed) {
        stop_all();
        return failed;
      }
      if (std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exited; })) {
        stop_all();  // whatever the workers left running in their process groups
        return nullptr;
      }
    }
  }

  int size() const { return static_cast<int>(workers_.size()); }

 private:
  void spawn(Worker& w, const std::string& program, const std::vector<std::pair<std::string, std::string>>& vars,
             int attempt) {
    w.log_fd = ::open(w.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    TRIREME_CHECK(w.log_fd >= 0, "launch: cannot open ", w.log_path, ": ", std::strerror(errno));
    if (attempt > 0) {
      std::string header = "=== restart " + std::to_string(attempt) + " ===\n";
      [[maybe_unused]] ssize_t ignored = ::write(w.log_fd, header.data(), header.size());
    }
    // Everything the child needs is built before fork: after it, only exec-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      std::string entry = *e;
      std::string name = entry.substr(0, entry.find('='));
      bool overridden = std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
      if (!overridden) env_strings.push_back(entry);
    }
    for (const auto& [k, v] : vars) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = options_.command;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);

    // What the child says when exec fails, built here (no allocation after fork).
    const std::string exec_failed = "trireme launch: exec '" + program + "' failed: ";
    int out[2], err[2];
    TRIREME_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "launch: pipe failed: ",
                  std::strerror(errno));
    pid_t parent = ::getpid();
    // A SIGTERM that reaches the child between fork and exec must kill it, not run the
    // launcher's handler copied into it: block the signals over fork, and let the child
    // restore the default actions before unblocking them.
    sigset_t stop_signals, old_mask;
    sigemptyset(&stop_signals);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
    ::pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
    pid_t pid = ::fork();
    if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    TRIREME_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);                   // its own process group: killpg reaches its children
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it dies with the launcher
      if (::getppid() != parent) ::_exit(127);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(program.c_str(), argv.data(), envp.data());
      const char* why = ::strerrordesc_np(errno);  // a static string: safe after fork
      if (!why) why = "unknown error";
      [[maybe_unused]] ssize_t a = ::write(2, exec_failed.data(), exec_failed.size());
      [[maybe_unused]] ssize_t b = ::write(2, why, std::strlen(why));
      [[maybe_unused]] ssize_t c = ::write(2, "\n", 1);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so killpg works even before the child ran
    watchdog_.watch(pid);
    ::close(out[1]);
    ::close(err[1]);
    w.pid = pid;
    w.out_fd = out[0];
    w.err_fd = err[0];
  }

  // Moves workers' output to the console and the logs, waiting up to `timeout` for some.
  void pump(milliseconds timeout) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, bool>> owners;  // (worker, is stderr)
    for (auto& w : workers_) {
      if (w.out_fd >= 0) fds.push_back({w.out_fd, POLLIN, 0}), owners.emplace_back(&w, false);
      if (w.err_fd >= 0) fds.push_back({w.err_fd, POLLIN, 0}), owners.emplace_back(&w, true);
    }
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (rc <= 0) return;
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents) read_from(*owners[i].first, owners[i].second);
    }
  }

  void read_from(Worker& w, bool is_err) {
    int& fd = is_err ? w.err_fd : w.out_fd;
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      flush_partial(w, is_err);
      ::close(fd);
      fd = -1;
      return;
    }
    [[maybe_unused]] ssize_t ignored = ::write(w.log_fd, buf, static_cast<size_t>(n));
    std::string& partial = is_err ? w.err_partial : w.out_partial;
    partial.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = partial.find('\n', start)) != std::string::npos) {
      emit_line(w, is_err, partial.substr(start, nl - start));
      start = nl + 1;
    }
    partial.erase(0, start);
  }

  void flush_partial(Worker& w, bool is_err) {
    std::string& partial = is_err ? w.err_partial : w.out_partial;
    if (!partial.empty()) emit_line(w, is_err, partial);
    partial.clear();
  }

  void emit_line(Worker& w, bool is_err, const std::string& line) {
    w.tail.push_back(line);
    while (static_cast<int>(w.tail.size()) > options_.tail_lines) w.tail.pop_front();
    if (!options_.echo) return;
    std::string out = "[rank " + std::to_string(w.rank) + "] " + line + "\n";
    [[maybe_unused]] ssize_t ignored = ::write(is_err ? 2 : 1, out.data(), out.size());
  }

  void reap() {
    for (auto& w : workers_) {
      if (w.exited) continue;
      int status = 0;
      pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid) {
        w.exited = true;
        w.status = status;
      }
    }
  }

  // SIGTERM to every worker's process group, SIGKILL after the grace period; reaps every
  // worker and collects their last output. Idempotent.
  void stop_all() {
    for (auto& w : workers_) ::killpg(w.pid, SIGTERM);
    auto deadline = LaunchClock::now() + options_.grace;
    while (LaunchClock::now() < deadline) {
      reap();
      if (std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exited; })) break;
      pump(milliseconds(10));
    }
    for (auto& w : workers_) ::killpg(w.pid, SIGKILL);  // also what an exited worker left behind
    for (auto& w : workers_) {
      if (!w.exited) {
        while (::waitpid(w.pid, &w.status, 0) < 0 && errno == EINTR) {
        }
        w.exited = true;
      }
      // The worker's children that outlived it were re-parented to this launcher (a child
      // subreaper) and have just been sent SIGKILL with their group: reap them.
      while (::waitpid(-w.pid, nullptr, 0) > 0 || errno == EINTR) {
      }
      if (!w.forgotten) {
        watchdog_.forget(w.pid);
        w.forgotten = true;
      }
    }
    drain();
  }

  // Reads what is left in the pipes without blocking (a grandchild that escaped the process
  // group may still hold a pipe open; it is not waited for).
  void drain() {
    for (auto& w : workers_) {
      for (bool is_err : {false, true}) {
        int& fd = is_err ? w.err_fd : w.out_fd;
        if (fd < 0) continue;
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
        while (fd >= 0) {
          pollfd p{fd, POLLIN, 0};
          if (::poll(&p, 1, 0) <= 0) break;
          read_from(w, is_err);
        }
        if (fd >= 0) {
          flush_partial(w, is_err);
          ::close(fd);
          fd = -1;
        }
      }
    }
  }

  const LaunchOptions& options_;
  Watchdog& watchdog_;
  std::deque<Worker> workers_;  // deque: Worker addresses stay put
};

std::string describe_failure(const Worker& w, int group_size, const LaunchOptions& options) {
  std::string how = WIFSIGNALED(w.status) ? "was killed by " + signal_name(WTERMSIG(w.status))
                                          : "exited with code " + std::to_string(WEXITSTATUS(w.status));
  std::string msg = str_cat("trireme launch: rank ", w.rank, " (local rank ", w.local_rank, " on node ",
                            options.node_rank, ", pid ", w.pid, ") ", how, "; stopped the other ", group_size - 1,
                            " local worker(s).");
  if (w.tail.empty()) return msg + "\n(its log " + w.log_path + " is empty)";
  msg += str_cat("\nlast ", w.tail.size(), " line(s) of its log ", w.log_path, ":");
  for (const auto& line : w.tail) msg += "\n  | " + line;
  return msg;
}

int exit_code_of(const Worker& w) {
  return WIFSIGNALED(w.status) ? 128 + WTERMSIG(w.status) : WEXITSTATUS(w.status);
}

}  // namespace

void launch_validate(const LaunchOptions& options) {
  TRIREME_CHECK(!options.command.empty(), "launch: no program given (usage: trireme launch [options] -- PROGRAM ARGS)");
  TRIREME_CHECK(options.nnodes >= 1 && options.nnodes <= kMaxNodes, "launch: --nnodes ", options.nnodes,
                " must be in 1..", kMaxNodes);
  TRIREME_CHECK(options.nproc_per_node >= 1 && options.nproc_per_node <= kMaxProcPerNode, "launch: --nproc-per-node ",
                options.nproc_per_node, " must be in 1..", kMaxProcPerNode);
  checked_mul(options.nnodes, options.nproc_per_node, "launch: the world size --nnodes x --nproc-per-node");
  TRIREME_CHECK(options.node_rank >= 0 && options.node_rank < options.nnodes, "launch: --node-rank ",
                options.node_rank, " is outside ", options.nnodes, " node(s) (it must be in 0..", options.nnodes - 1, ")");
  TRIREME_CHECK(options.max_restarts >= 0, "launch: --max-restarts ", options.max_restarts, " must be >= 0");
  TRIREME_CHECK(options.master_port >= 0 && options.master_port < 65536, "launch: --master-port ",
                options.master_port, " is not a port (0..65535)");
  TRIREME_CHECK(options.nnodes == 1 || options.master_port > 0,
                "launch: a job over several nodes needs --master-port (every node must know it)");
  TRIREME_CHECK(options.grace.count() >= 0, "launch: --grace-ms ", options.grace.count(),
                " must be >= 0 (milliseconds between SIGTERM and SIGKILL)");
  TRIREME_CHECK(!options.master_addr.empty(), "launch: --master-addr must not be empty");
  TRIREME_CHECK(options.token.size() <= kStoreMaxTokenBytes, "launch: --token has ", options.token.size(),
                " bytes; at most ", kStoreMaxTokenBytes, " are allowed");
  TRIREME_CHECK(options.tail_lines >= 0, "launch: tail_lines must be >= 0");
}

LaunchResult launch(const LaunchOptions& options) {
  launch_validate(options);

  LaunchResult result;
  std::string token = options.token;
  if (token.empty()) {
    const char* env_token = std::getenv(kStoreTokenEnv);
    if (env_token && *env_token) token = env_token;
  }
  if (token.empty()) {
    TRIREME_CHECK(options.nnodes == 1, "launch: a job over several nodes needs the same token on every node: set ",
                  kStoreTokenEnv, " (e.g. to the output of `openssl rand -hex 16`) before launching");
    token = store_make_token();
  }

  result.log_dir = options.log_dir;
  if (result.log_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trireme-launch-XXXXXX").string();
    TRIREME_CHECK(::mkdtemp(tmpl.data()) != nullptr, "launch: cannot create a log folder: ", std::strerror(errno));
    result.log_dir = tmpl;
  } else {
    std::filesystem::create_directories(result.log_dir);
  }

  // Before the store's thread exists, so the fork copies a single-threaded process
  // (Note [no orphans]).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  Watchdog watchdog;

  std::unique_ptr<StoreServer> server;
  int port = options.master_port;
  if (options.node_rank == 0) {
    std::string host = options.store_host.empty() ? (options.nnodes == 1 ? "127.0.0.1" : "0.0.0.0") : options.store_host;
    try {
      server = std::make_unique<StoreServer>(StoreServerOptions{.host = host, .port = options.master_port, .token = token});
    } catch (const Error& e) {
      bool in_use = std::string(e.what()).find("in use") != std::string::npos;
      TRIREME_FAIL("launch: cannot host the job's store on ", host, ":", options.master_port,
                   in_use ? ": the port is already in use (another job's store, or another program; choose a free "
                            "--master-port, or leave it out on one node to let the system pick)"
                          : str_cat(": ", e.what()));
    }
    port = server->port();
  }

  SignalGuard signals;
  for (int attempt = 0;; ++attempt) {
    if (server) server->clear();
    int signal = 0;
    Group group(options, token, port, attempt, result.log_dir, watchdog);
    const Worker* failed = group.watch(&signal);
    if (signal) {
      result.exit_code = 128 + signal;
      result.message = str_cat("trireme launch: received ", signal_name(signal), "; stopped all ", group.size(),
                               " local worker(s)");
      return result;
    }
    if (!failed) {
      result.exit_code = 0;
      result.failed_rank = -1;
      result.message.clear();
      return result;
    }
    result.failed_rank = failed->rank;
    result.exit_code = exit_code_of(*failed);
    result.message = describe_failure(*failed, group.size(), options);
    if (attempt >= options.max_restarts) return result;
    result.restarts = attempt + 1;
    std::string note = result.message + str_cat("\ntrireme launch: restarting the group (restart ", attempt + 1,
                                                " of ", options.max_restarts, ")\n");
    [[maybe_unused]] ssize_t ignored = ::write(2, note.data(), note.size());
  }
}

int launch_main(const LaunchOptions& options) {
  try {
    LaunchResult r = launch(options);
    if (!r.message.empty()) std::fprintf(stderr, "%s\n", r.message.c_str());
    return r.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trireme launch: %s\n", e.what());
    return 1;
  }
}

LaunchOptions launch_parse_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  auto to_int = [](const std::string& flag, const std::string& v) {
    try {
      size_t used = 0;
      int x = std::stoi(v, &used);
      if (used == v.size()) return x;
    } catch (const std::exception&) {
    }
    TRIREME_FAIL("launch: ", flag, " expects an integer, got '", v, "'");
  };
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;  // the program
    std::string flag = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    std::replace(flag.begin() + 2, flag.end(), '_', '-');
    auto next = [&]() -> std::string {
      if (has_value) return value;
      TRIREME_CHECK(i + 1 < args.size(), "launch: ", flag, " needs a value");
      return args[++i];
    };
    if (flag == "--nnodes") o.nnodes = to_int(flag, next());
    else if (flag == "--nproc-per-node") o.nproc_per_node = to_int(flag, next());
    else if (flag == "--node-rank") o.node_rank = to_int(flag, next());
    else if (flag == "--master-addr") o.master_addr = next();
    else if (flag == "--master-port") o.master_port = to_int(flag, next());
    else if (flag == "--max-restarts") o.max_restarts = to_int(flag, next());
    else if (flag == "--log-dir") o.log_dir = next();
    else if (flag == "--store-host") o.store_host = next();
    else if (flag == "--token") o.token = next();
    else if (flag == "--grace-ms") o.grace = milliseconds(to_int(flag, next()));
    else if (flag == "--quiet") o.echo = false;
    else TRIREME_FAIL("launch: unknown option ", flag, "\n", launch_usage());
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  launch_validate(o);
  return o;
}

const char* launch_usage() {
  return "usage: trireme launch [options] -- PROGRAM [ARGS...]\n"
         "  --nnodes N            number of nodes (default 1)\n"
         "  --nproc-per-node N    workers on this node (default 1)\n"
         "  --node-rank R         this node's index; node 0 hosts the store (default 0)\n"
         "  --master-addr HOST    address of node 0's store (default 127.0.0.1)\n"
         "  --master-port PORT    its port (default: a free port; required with --nnodes > 1)\n"
         "  --max-restarts N      restart the whole group up to N times after a failure (default 0)\n"
         "  --log-dir DIR         one log file per rank, DIR/rank_<r>.log (default: a new temp folder)\n"
         "  --store-host HOST     address the store listens on (default 127.0.0.1, or 0.0.0.0 with several nodes)\n"
         "  --token TOKEN         the job's store token (default: random; with several nodes $TRIREME_STORE_TOKEN)\n"
         "  --grace-ms MS         time between SIGTERM and SIGKILL when stopping workers (default 5000)\n"
         "  --quiet               do not copy the workers' output to the console (the logs still have it)\n";
}

}  // namespace trireme::dist
