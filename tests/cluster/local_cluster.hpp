// A cluster of network-namespace nodes for one test (scripts/local-cluster.sh), made in the
// constructor and removed, with every process on it, in the destructor. Each test's cluster has
// its own name, so tests run side by side.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "support/process.hpp"

namespace loom::test {

class LocalCluster {
 public:
  explicit LocalCluster(int nodes) : nodes_(nodes) {
    static std::atomic<int> made{0};
    name_ = "lt" + std::to_string(::getpid()) + "x" + std::to_string(made++);
    const Result r = script("up " + std::to_string(nodes));
    INFO(r.out);
    REQUIRE(r.rc == 0);
  }
  ~LocalCluster() { script("down"); }
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // scripts/local-cluster.sh ARGS for this cluster.
  Result script(const std::string& args) const { return sh(command(args)); }
  std::string command(const std::string& args) const {
    return "LOOM_CLUSTER=" + name_ + " bash " LOOM_SOURCE_DIR "/scripts/local-cluster.sh " + args;
  }
  // A shell command line that runs `cmd` on `node` with the test plugins on the search path.
  std::string on(const std::string& node, const std::string& cmd) const {
    return command("exec " + node + " env LOOM_PLUGIN_PATH=" LOOM_TEST_PLUGIN_DIR " " + cmd);
  }
  // Whatever still runs on `node` (pids), "" when nothing.
  std::string left_on(const std::string& node) const {
    std::string out = script("pids " + node).out;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }

  // `loom ARGS --nnodes N --node-rank K` on every node at once, node 0 hosting the store at
  // MASTER_ADDR=node0; each node's result, in node order. `during` runs while they do.
  std::vector<Result> loom_on_nodes(const std::string& args,
                                    const std::function<void()>& during = {}) const {
    std::vector<Result> out(nodes_);
    std::vector<std::thread> threads;
    for (int k = 0; k < nodes_; ++k)
      threads.emplace_back([&, k] {
        out[k] = sh(on("node" + std::to_string(k),
                       "MASTER_ADDR=node0 MASTER_PORT=29400 " LOOM_BIN " " + args + " --nnodes " +
                           std::to_string(nodes_) + " --node-rank " + std::to_string(k)));
      });
    if (during) during();
    for (auto& t : threads) t.join();
    return out;
  }

  // mpirun from the hub over these nodes (a hostfile of `slots` ranks each, started through
  // `local-cluster.sh rsh`), Open MPI's TCP confined to the cluster's subnet.
  std::string mpirun(int np, const std::string& hostfile) const {
    return on("hub",
              "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --hostfile " +
                  hostfile + " -np " + std::to_string(np) +
                  " --mca plm_rsh_agent 'bash " LOOM_SOURCE_DIR
                  "/scripts/local-cluster.sh rsh'"
                  " --mca btl self,vader,tcp --mca btl_tcp_if_include 10.213.0.0/24 --mca "
                  "oob_tcp_if_include 10.213.0.0/24");
  }

 private:
  int nodes_;
  std::string name_;
};

}  // namespace loom::test
