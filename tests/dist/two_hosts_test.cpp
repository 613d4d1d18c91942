// Two "hosts" on one machine: two network namespaces joined by a veth pair (10.77.0.1/24 and
// 10.77.0.2/24; the traffic never leaves this machine), one `trireme launch --nnodes 2` in each,
// running the collectives worker across 4 ranks. Skips when namespaces cannot be made (not
// root, no iproute2, or no permission); the namespaces are always removed.
#include <cstdlib>
#include <unistd.h>

#include "launch_helpers.h"

using namespace trireme::dist::testing;

namespace {

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Creates the namespaces and the link; removes them when it goes away.
struct TwoNamespaces {
  std::string a, b, error;
  TwoNamespaces() {
    std::string id = std::to_string(::getpid());
    a = "trA" + id;
    b = "trB" + id;
    std::string va = "tva" + id, vb = "tvb" + id;
    const std::vector<std::string> steps = {
        "ip netns add " + a, "ip netns add " + b, "ip link add " + va + " type veth peer name " + vb,
        "ip link set " + va + " netns " + a, "ip link set " + vb + " netns " + b,
        "ip -n " + a + " addr add 10.77.0.1/24 dev " + va, "ip -n " + b + " addr add 10.77.0.2/24 dev " + vb,
        "ip -n " + a + " link set " + va + " up", "ip -n " + b + " link set " + vb + " up",
        "ip -n " + a + " link set lo up", "ip -n " + b + " link set lo up"};
    for (const auto& step : steps) {
      if (sh(step) != 0) {
        error = "'" + step + "' failed";
        return;
      }
    }
  }
  ~TwoNamespaces() {
    sh("ip netns del " + a);  // takes its end of the veth pair, and so the pair, with it
    sh("ip netns del " + b);
  }
};

}  // namespace

TEST(TwoHosts, CollectivesAcrossTwoNetworkNamespaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  if (sh("command -v ip") != 0) GTEST_SKIP() << "iproute2 (the ip command) is not installed";
  TwoNamespaces ns;
  if (!ns.error.empty()) GTEST_SKIP() << "cannot create network namespaces here: " << ns.error;

  std::string dir = fresh_dir();
  const std::string token = "0123456789abcdef0123456789abcdef";
  auto node = [&](int node_rank, const std::string& netns, const std::string& address) {
    return "( timeout 60 ip netns exec " + netns + " env TRIREME_STORE_TOKEN=" + token +
           " TRIREME_GLOO_HOST=" + address + " " + TRIREME_BINARY + " launch --nnodes 2 --node-rank " +
           std::to_string(node_rank) + " --nproc-per-node 2 --master-addr 10.77.0.1 --master-port 29577 --log-dir " +
           dir + "/node" + std::to_string(node_rank) + " --grace-ms 1000 -- " + TRIREME_DIST_WORKER +
           " collectives > " + dir + "/out" + std::to_string(node_rank) + " 2>&1; echo $? > " + dir + "/rc" +
           std::to_string(node_rank) + " )";
  };
  std::string both = node(0, ns.a, "10.77.0.1") + " & " + node(1, ns.b, "10.77.0.2") + " & wait";
  std::system(("sh -c '" + both + "'").c_str());
  std::string out0 = read_file(dir + "/out0"), out1 = read_file(dir + "/out1");
  EXPECT_EQ(read_file(dir + "/rc0"), "0\n") << out0 << "\n----\n" << out1;
  EXPECT_EQ(read_file(dir + "/rc1"), "0\n") << out0 << "\n----\n" << out1;
  // Every global rank ran the closed-form checks: ranks 0-1 on node 0, 2-3 on node 1.
  for (int rank = 0; rank < 4; ++rank) {
    std::string log = read_file(dir + "/node" + std::to_string(rank / 2) + "/rank_" + std::to_string(rank) + ".log");
    EXPECT_NE(log.find("rank " + std::to_string(rank) + ": collectives ok"), std::string::npos) << log;
  }
}
