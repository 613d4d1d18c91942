// The launcher leaves nothing behind even when it is killed with SIGKILL, says why an exec
// failed, and refuses out-of-range flags with exit status 2.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "launch_helpers.h"

using namespace trireme;
using namespace trireme::dist;
using namespace trireme::dist::testing;

namespace {

// Runs `trireme launch ARGS` with stdout and stderr into a file; returns the exit status.
int run_launch(const std::string& args, std::string* output) {
  std::string out = fresh_dir() + "/out.txt";
  int rc = std::system((std::string(TRIREME_BINARY) + " launch " + args + " >" + out + " 2>&1").c_str());
  *output = read_file(out);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

bool gone_within(int pid, int tries) {
  for (int i = 0; i < tries; ++i)
    if (process_gone(pid)) return true;
  return false;
}

}  // namespace

TEST(LauncherHygiene, KillingTheLauncherWithSigkillLeavesNoWorkerOrGrandchild) {
  std::string logs = fresh_dir();
  pid_t launcher = ::fork();
  if (launcher == 0) {
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(TRIREME_BINARY, TRIREME_BINARY, "launch", "--nproc-per-node", "2", "--log-dir", logs.c_str(), "--quiet",
            "--", "sh", "-c", "echo pid=$$; sleep 300 & echo child=$!; wait", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(launcher, 0);
  LaunchResult so_far;
  so_far.log_dir = logs;
  std::vector<int> pids;
  for (int i = 0; i < 1000 && pids.size() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pids = pids_in_logs(so_far, 2);
  }
  ASSERT_EQ(pids.size(), 4u) << all_logs(so_far, 2);  // two workers, each with a child
  ::kill(launcher, SIGKILL);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  for (int pid : pids) EXPECT_TRUE(gone_within(pid, 10)) << "pid " << pid << " outlived the launcher";
  // Whatever was re-parented to this process (a subreaper after other launcher tests) is reaped.
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

TEST(LauncherHygiene, AnExecFailureNamesTheProgramAndTheReason) {
  auto o = quick_job(1, {"/nonexistent/trireme-no-such-program"});
  LaunchResult r = launch(o);
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.message.find("exec '/nonexistent/trireme-no-such-program' failed: No such file or directory"),
            std::string::npos)
      << r.message;

  std::string not_executable = fresh_dir() + "/script.sh";
  { std::ofstream(not_executable) << "#!/bin/sh\necho hi\n"; }
  ::chmod(not_executable.c_str(), 0644);
  LaunchResult r2 = launch(quick_job(1, {not_executable}));
  EXPECT_EQ(r2.exit_code, 127);
  EXPECT_NE(r2.message.find("failed: Permission denied"), std::string::npos) << r2.message;
}

TEST(LauncherHygiene, OutOfRangeFlagsAreRefused) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--grace-ms", "-5", "--", "true"},
           {"--grace-ms=-1", "--", "true"},
           {"--nproc-per-node", "0", "--", "true"},
           {"--nproc-per-node", "100000", "--", "true"},
           {"--nnodes", "-1", "--", "true"},
           {"--nnodes", "2", "--node-rank", "2", "--master-port", "29500", "--", "true"},
           {"--master-port", "70000", "--", "true"},
           {"--max-restarts", "-2", "--", "true"},
           {"--nproc-per-node", "2"},  // no program
       }) {
    EXPECT_THROW(launch_parse_args(args), Error) << args[0] << " " << (args.size() > 1 ? args[1] : "");
  }
  try {
    launch_parse_args({"--grace-ms", "-5", "--", "true"});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--grace-ms -5"), std::string::npos) << e.what();
  }
}

TEST(LauncherHygiene, TheCliExitsWithStatus2OnABadFlag) {
  std::string output;
  EXPECT_EQ(run_launch("--grace-ms -5 -- true", &output), 2) << output;
  EXPECT_NE(output.find("--grace-ms"), std::string::npos) << output;
  EXPECT_EQ(run_launch("--nproc-per-node 0 -- true", &output), 2) << output;
  EXPECT_EQ(run_launch("--grace-ms 0 --quiet -- true", &output), 0) << output;
}
