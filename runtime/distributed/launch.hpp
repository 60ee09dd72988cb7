// Processes: which rank this process is (from torchrun-style variables, Slurm or Open MPI), and
// the local launcher that spawns N ranks of a command, prefixes their output, and on the first
// failure stops the rest and names the rank. Children die with the launcher (PR_SET_PDEATHSIG),
// so no outcome leaves an orphan.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distributed/rank_env.hpp"

namespace loom::dist {

// The rank set by an outer launcher, or nullopt when this process was started on its own.
// Under Slurm, MASTER_ADDR defaults to the first host of the step's nodelist; under Slurm and
// Open MPI, MASTER_PORT defaults to port_for_job of the job (and step) id. Elsewhere MASTER_ADDR
// is 127.0.0.1 and MASTER_PORT 29500.
std::optional<RankEnv> rank_from_environment();

// A port in [20000, 32768) hashed from a job's name ("1234.0"), the same on every rank of it.
int port_for_job(const std::string& job);

// The first host of a Slurm nodelist: "node[03-05,9],login1" -> "node03".
std::string first_host(const std::string& nodelist);

// Runs `nproc` copies of argv (argv[0] is the program) with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, and returns the job's exit code: 0 when
// every rank exited 0, else (after stopping the others) 2 when the first rank to fail exited 2
// (a usage or config error), otherwise 1.
int spawn_local(int nproc, const std::vector<std::string>& argv);

// One node's share of a job over several nodes (torchrun's --nnodes/--node-rank): this node's
// launcher starts ranks node_rank * nproc ... + nproc - 1 of nnodes * nproc. MASTER_ADDR must name
// node 0 (where rank 0 hosts the store) and be reachable from every node; MASTER_PORT (default
// 29500) is bound by node 0's launcher before its ranks start.
struct NodeSpec {
  int nproc = 1, nnodes = 1, node_rank = 0;
  // Polled twice a second when set: true when a rank on another node failed, and this node's
  // ranks must go (an elastic job's round is over).
  std::function<bool()> peers_failed;
  // When set, receives the first failure in words ("rank 2 on node1 exited with status 1").
  std::string* failure = nullptr;
};
int spawn_node(const NodeSpec& node, const std::vector<std::string>& argv);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// The store's listening socket the local launcher opened for rank 0 (LOOM_STORE_FD), or -1.
// Binding it in the launcher, before any rank starts, leaves no window in which another process
// could take MASTER_PORT.
int inherited_store_fd();

}  // namespace loom::dist
