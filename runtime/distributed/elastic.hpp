// Elastic restarts (`loom train --max-restarts N [--min-nodes M]`): each node's launcher runs the
// job in rounds. When a rank fails anywhere, every surviving launcher stops its ranks, the
// launchers meet again, and the next round starts on the nodes that came back, resuming from the
// latest committed checkpoint (`checkpoint.resume = "auto"`). A round on fewer nodes has fewer
// ranks; with `[parallel] dp = "auto"` the dp degree shrinks and gradient accumulation keeps the
// global batch. Node 0's launcher hosts the launchers' own store (MASTER_PORT + 1) and writes
// each restart, with its cause, to the run's events.jsonl. Node 0 must survive: it holds that
// store, as torchrun's static rendezvous endpoint must.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "distributed/launch.hpp"

namespace loom::dist {

struct ElasticSpec {
  NodeSpec node;  // nnodes: the nodes the job starts on (and the most it runs on)
  int max_restarts = 0;
  int min_nodes = 1;                     // a round with fewer ends the job
  std::chrono::seconds rejoin_wait{10};  // how long node 0 waits for the others after a failure
  std::filesystem::path run_dir;         // where events.jsonl is
};

// Runs argv (a `loom train` command line) round after round; the job's exit code.
int run_elastic(const ElasticSpec& spec, const std::vector<std::string>& argv);

}  // namespace loom::dist
