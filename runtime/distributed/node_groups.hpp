// [parallel] groups: the node groups of a mixed cluster (docs/cluster.md, "Mixed clusters").
// Ranks are numbered node by node (the local launcher, Slurm's block distribution and Open MPI's
// by-slot mapping all do), and pp is the mesh's outermost axis, so the groups, listed in node
// order, hold the pipeline stages in order: group 0 the first stages, and so on.
#pragma once

#include <string>
#include <vector>

#include "config/section.hpp"

namespace loom::dist {

struct NodeGroup {
  std::string name;
  int nodes = 1;
  int threads = -1;    // [run] threads on this group's ranks; -1 = [run] threads
  std::string device;  // [run] device on this group's ranks; "" = [run] device
};

// The groups, each entry "NAME nodes=N [threads=T] [device=D]"; empty when none are given.
// A malformed entry is a ConfigError naming it.
std::vector<NodeGroup> read_groups(const config::Section& parallel);

// Whether the groups hold the job: their nodes x nproc ranks add up to the world, and each
// holds whole pipeline stages (world / pp ranks each). "" when they do; else the reason.
std::string groups_problem(const std::vector<NodeGroup>& groups, int nproc, int world, int pp);

// The ranks of a job on these groups (their nodes x nproc), or nproc when there are none.
int groups_world(const std::vector<NodeGroup>& groups, int nproc);

// The group rank `rank` is in (its node is rank / nproc).
int group_of_rank(const std::vector<NodeGroup>& groups, int nproc, int rank);

// The settings of rank `rank`'s group, as --set overrides of the config's ([run] threads and
// device); none without groups.
std::vector<std::string> group_overrides(const std::vector<NodeGroup>& groups, int nproc, int rank);

// Under a Slurm heterogeneous job step (SLURM_HET_SIZE; srun started the ranks), component k must
// be group k: the same node count and nodes x nproc tasks. Throws ConfigError naming the component
// otherwise.
void check_het_components(const std::vector<NodeGroup>& groups, int nproc);

// "fast: node 0 (ranks 0-1, stage 0); slow: node 1 (ranks 2-3, stage 1)".
std::string describe_groups(const std::vector<NodeGroup>& groups, int nproc, int world, int pp);

}  // namespace loom::dist
