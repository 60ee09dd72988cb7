// A mixed cluster for `loom plan`: node groups of different kinds in one job (an H100 partition
// beside an A100 one, or nodes with fewer cores), each described by a uniform cluster file, and
// the link between the groups. The file:
//
//   [cluster]              name, description, sources
//   [[group]]              name, cluster (a clusters/*.toml, relative to this file), nodes,
//                          per_node (ranks per node; default the file's), speed (default 1)
//   [between]              kind, bandwidth_gbps (GB/s per device, one way), latency_us
//
// `speed` scales a group's compute against its file's figures: a power cap, or a CPU quota.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "plan/cluster.hpp"

namespace loom::plan {

struct NodeGroupKind {
  std::string name;
  Cluster cluster;  // its file's figures, compute scaled by speed
  int nodes = 1, per_node = 1;
  double speed = 1;
  int devices() const { return nodes * per_node; }
};

struct MixedCluster {
  std::string name, description, source;
  std::vector<NodeGroupKind> groups;  // in the file's order
  Link between;                       // from one group's devices to another's
  int devices() const;
  // "fast: 1 x CPU core; slow: 1 x CPU core at 0.5 speed; between: loopback 1.5 GB/s, 260 us".
  std::string describe() const;
};

// True when a cluster file has [[group]] entries.
bool has_groups(const std::filesystem::path& file);

// Reads and checks a mixed cluster file: an unknown key (with the nearest valid one), a group
// without a name, nodes or cluster file, a group file that does not load, or two groups of one
// name are each a ConfigError naming the file and the group.
MixedCluster load_mixed_cluster(const std::filesystem::path& file);
MixedCluster parse_mixed_cluster(const std::string& text, const std::string& source,
                                 const std::filesystem::path& dir);

}  // namespace loom::plan
