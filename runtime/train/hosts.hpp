// Where a job's ranks run, and how fast each host's link to rank 0's host is. Rank 0 prints both
// at start-up and writes the links to the run directory (links.json), so `loom doctor` can name
// the slow node when communication dominates a step.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "distributed/comm.hpp"
#include "distributed/network.hpp"

namespace loom::train {

struct Hosts {
  std::string line;  // "node0 (eth0 10.1.0.1): ranks 0-1; node1 (eth0 10.1.0.2): ranks 2-3"
  std::vector<std::string> of_rank;  // each rank's host name
};

// Gathers every rank's host, interface and address over the world communicator (a collective:
// every rank calls it), and remembers who is behind each address for error messages.
Hosts gather_hosts(dist::CommWorld& world, const dist::InterfaceChoice& nic);

struct Link {
  std::string host;
  double mb_per_s;  // a 1 MiB buffer sent to the host's first rank and back, from rank 0
};

// Each other host's link to rank 0's host, one host at a time (every rank calls it; only rank 0
// gets the figures). Nothing when the job runs on one host, or the backend has no send/recv.
std::vector<Link> probe_links(dist::CommWorld& world, const Hosts& hosts);

// "node1 11.2 MB/s, node2 940.0 MB/s" and links.json's text.
std::string describe_links(const std::vector<Link>& links);
void write_links(const std::filesystem::path& run_dir, const std::string& rank0_host,
                 const std::vector<Link>& links);

}  // namespace loom::train
