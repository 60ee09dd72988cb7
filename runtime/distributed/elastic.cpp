#include "distributed/elastic.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include "core/errors.hpp"
#include "core/json.hpp"
#include "distributed/network.hpp"
#include "distributed/store.hpp"

namespace loom::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// The last step rank 0 logged (0 when none): where the failed round got to.
int64_t last_logged_step(const std::filesystem::path& run_dir) {
  std::ifstream in(run_dir / "metrics.jsonl");
  int64_t last = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{\"step\": ", 0) == 0)
      last = std::max<int64_t>(last, std::atoll(line.c_str() + 9));
  return last;
}

void log_restart(const std::filesystem::path& run_dir, int round, const std::string& cause,
                 const std::string& missing, int nodes, int world) {
  std::ofstream out(run_dir / "events.jsonl", std::ios::app);
  out << "{\"step\": " << last_logged_step(run_dir)
      << ", \"layer\": \"job\", \"event\": \"restart\", \"round\": " << round
      << ", \"cause\": " << json_quote(cause) << ", \"missing_nodes\": " << json_quote(missing)
      << ", \"nodes\": " << nodes << ", \"world\": " << world << "}\n";
}

// One round's membership, as the launchers agree on it through node 0's store.
struct Round {
  int nodes = 0;       // 0: too few came back, the job ends
  int node_rank = -1;  // this launcher's place; -1: it came too late and is not in the round
  std::vector<std::string> hosts;  // by node rank
};

// Every launcher joins round r; node 0 closes it when all `most` nodes are in, or when `wait`
// has passed with at least `least` in, and numbers the members (itself first).
Round join(StoreClient& store, int r, bool host_of_store, int most, int least,
           std::chrono::seconds wait) {
  const std::string key = "round" + std::to_string(r) + "/";
  const int64_t order = store.add(key + "joined", 1) - 1;
  store.set(key + "host/" + std::to_string(order), bytes(host_name()));
  if (host_of_store) {
    const auto deadline = Clock::now() + wait;
    int64_t joined = 0;
    while ((joined = store.add(key + "joined", 0)) < most && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    joined = std::min<int64_t>(joined, most);
    const int nodes = joined >= least ? static_cast<int>(joined) : 0;
    std::vector<int64_t> members = {
        order};  // node 0 keeps node rank 0: its launcher binds MASTER_PORT
    for (int64_t o = 0; o < joined; ++o)
      if (o != order) members.push_back(o);
    for (size_t i = 0; i < members.size(); ++i)
      store.set(key + "rank/" + std::to_string(members[i]), bytes(std::to_string(i)));
    store.set(key + "nodes", bytes(std::to_string(nodes)));
  }
  Round round;
  round.nodes = std::stoi(text(store.get(key + "nodes")));
  if (round.nodes > 0 && store.check(key + "rank/" + std::to_string(order)))
    round.node_rank = std::stoi(text(store.get(key + "rank/" + std::to_string(order))));
  round.hosts.resize(round.nodes);
  for (int64_t o = 0; o < round.nodes; ++o) {
    const int rank = std::stoi(text(store.get(key + "rank/" + std::to_string(o))));
    round.hosts[rank] = text(store.get(key + "host/" + std::to_string(o)));
  }
  return round;
}

}  // namespace

int run_elastic(const ElasticSpec& spec, const std::vector<std::string>& argv) {
  const bool several = spec.node.nnodes > 1, store_host = spec.node.node_rank == 0;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<StoreClient> store;
  if (several) {
    const char* addr = std::getenv("MASTER_ADDR");
    if (!addr)
      throw UsageError("an elastic job over several nodes needs MASTER_ADDR: node 0's address");
    const char* port_text = std::getenv("MASTER_PORT");
    const int port = (port_text ? std::atoi(port_text) : 29500) + 1;
    if (store_host) server = std::make_unique<StoreServer>("0.0.0.0", port);
    store = std::make_unique<StoreClient>(addr, port, std::chrono::seconds(120));
  }
  std::vector<std::string> previous;
  std::string cause;
  for (int r = 0;; ++r) {
    Round round{1, 0, {host_name()}};
    if (several)
      round =
          join(*store, r, store_host, spec.node.nnodes, r == 0 ? spec.node.nnodes : spec.min_nodes,
               r == 0 ? std::chrono::seconds(120) : spec.rejoin_wait);
    if (round.nodes == 0) {
      std::fprintf(
          stderr,
          "loom: elastic: fewer than --min-nodes %d node(s) came back for round %d; the job ends\n",
          spec.min_nodes, r);
      return 1;
    }
    if (round.node_rank < 0) {
      std::fprintf(
          stderr,
          "loom: elastic: round %d started without this node (it came back too late); exiting\n",
          r);
      return 1;
    }
    std::vector<std::string> args = argv;
    if (r > 0) {
      std::string missing;
      for (const std::string& h : previous)
        if (std::find(round.hosts.begin(), round.hosts.end(), h) == round.hosts.end())
          missing += (missing.empty() ? "" : ",") + h;
      std::fprintf(stderr,
                   "loom: elastic: restart %d of %d after \"%s\": %d node(s), %d ranks%s; resuming "
                   "from the latest checkpoint\n",
                   r, spec.max_restarts, cause.c_str(), round.nodes, round.nodes * spec.node.nproc,
                   missing.empty() ? "" : (", without " + missing).c_str());
      if (store_host)
        log_restart(spec.run_dir, r, cause, missing, round.nodes, round.nodes * spec.node.nproc);
      args.insert(args.end(), {"--set", "checkpoint.resume=auto"});
    }
    previous = round.hosts;
    NodeSpec node = spec.node;
    node.nnodes = round.nodes;
    node.node_rank = round.node_rank;
    const std::string failed_key = "round" + std::to_string(r) + "/failed";
    if (several) node.peers_failed = [&] { return store->check(failed_key); };
    std::string failure;
    node.failure = &failure;
    const int rc = spawn_node(node, args);
    if (rc == 0 || rc == 2 || rc == 3)
      return rc;  // done, a config error (no restart fixes it), or stopped by a signal
    if (several) {
      if (store->add(failed_key + "/count", 1) == 1)
        store->set(failed_key, bytes(failure));  // the first to fail says why
      cause = text(store->get(failed_key));
    } else {
      cause = failure;
    }
    if (r >= spec.max_restarts) {
      std::fprintf(stderr, "loom: elastic: %d restart(s) used (--max-restarts %d); the job fails\n",
                   r, spec.max_restarts);
      return rc;
    }
  }
}

}  // namespace loom::dist
