#include "distributed/node_groups.hpp"

#include <cstdlib>
#include <sstream>

#include "core/errors.hpp"
#include "core/nearest.hpp"

namespace loom::dist {

namespace {

std::string str(long long v) { return std::to_string(v); }

int positive_int(const std::string& value, const std::string& where) {
  char* end = nullptr;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v < 1 || v > 65536)
    throw ConfigError(where + " must be a whole number from 1 to 65536, not '" + value + "'");
  return int(v);
}

NodeGroup parse_group(const std::string& entry, size_t index) {
  const std::string where = "[parallel] groups[" + std::to_string(index) + "] = \"" + entry + "\"";
  std::istringstream in(entry);
  NodeGroup g;
  if (!(in >> g.name) || g.name.find('=') != std::string::npos)
    throw ConfigError(where +
                      ": an entry is \"NAME nodes=N [threads=T] [device=D]\", its name first");
  bool has_nodes = false;
  for (std::string word; in >> word;) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq),
                      value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (eq == std::string::npos || value.empty())
      throw ConfigError(where + ": '" + word + "' is not KEY=VALUE");
    if (key == "nodes")
      g.nodes = positive_int(value, where + ": nodes"), has_nodes = true;
    else if (key == "threads")
      g.threads = value == "0" ? 0 : positive_int(value, where + ": threads");
    else if (key == "device")
      g.device = value;
    else
      throw ConfigError(where + ": unknown setting '" + key + "' (nodes, threads, device)" +
                        did_you_mean(key, {"nodes", "threads", "device"}));
    if (key == "threads" && g.threads > 4096)
      throw ConfigError(where + ": threads must be from 0 (every core) to 4096");
    if (key == "device" && g.device != "cpu" && g.device != "strict" && g.device != "cuda")
      throw ConfigError(where + ": device '" + value +
                        "' is not one [run] device takes (cpu, strict, cuda)" +
                        did_you_mean(value, {"cpu", "strict", "cuda"}));
  }
  if (!has_nodes) throw ConfigError(where + ": nodes=N is missing (the group's node count)");
  return g;
}

}  // namespace

std::vector<NodeGroup> read_groups(const config::Section& parallel) {
  std::vector<NodeGroup> out;
  for (const std::string& entry : parallel.str_list("groups")) {
    out.push_back(parse_group(entry, out.size()));
    for (size_t i = 0; i + 1 < out.size(); ++i)
      if (out[i].name == out.back().name)
        throw ConfigError("[parallel] groups: the name '" + out.back().name + "' is given twice");
  }
  return out;
}

std::string groups_problem(const std::vector<NodeGroup>& groups, int nproc, int world, int pp) {
  if (groups.empty()) return "";
  long long ranks = 0;
  std::string sum;
  for (const NodeGroup& g : groups)
    ranks += (long long)g.nodes * nproc, sum += (sum.empty() ? "" : " + ") + str(g.nodes);
  if (ranks != world)
    return "[parallel] groups hold " + sum + " nodes x nproc " + str(nproc) + " = " + str(ranks) +
           " ranks; the job has " + str(world);
  const int per_stage = world / pp;
  for (const NodeGroup& g : groups)
    if ((g.nodes * nproc) % per_stage != 0)
      return "[parallel] groups: '" + g.name + "' holds " + str(g.nodes * nproc) +
             " ranks, not a multiple of a pipeline stage's " + str(per_stage) + " (world " +
             str(world) + " / pp " + str(pp) + "), so a stage would straddle two groups";
  return "";
}

int groups_world(const std::vector<NodeGroup>& groups, int nproc) {
  if (groups.empty()) return nproc;
  int nodes = 0;
  for (const NodeGroup& g : groups) nodes += g.nodes;
  return nodes * nproc;
}

int group_of_rank(const std::vector<NodeGroup>& groups, int nproc, int rank) {
  int first = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    first += groups[g].nodes * nproc;
    if (rank < first) return int(g);
  }
  return int(groups.size()) - 1;
}

std::vector<std::string> group_overrides(const std::vector<NodeGroup>& groups, int nproc,
                                         int rank) {
  std::vector<std::string> sets;
  if (groups.empty()) return sets;
  const NodeGroup& g = groups[size_t(group_of_rank(groups, nproc, rank))];
  if (g.threads >= 0) sets.push_back("run.threads=" + str(g.threads));
  if (!g.device.empty()) sets.push_back("run.device=\"" + g.device + "\"");
  return sets;
}

void check_het_components(const std::vector<NodeGroup>& groups, int nproc) {
  const char* size = std::getenv("SLURM_HET_SIZE");
  if (!size || groups.empty()) return;
  const int components = std::atoi(size);
  if (components != int(groups.size()))
    throw ConfigError("this Slurm heterogeneous job has " + std::string(size) +
                      " components; [parallel] groups lists " + str(groups.size()) +
                      " (component k runs group k)");
  for (int k = 0; k < components; ++k) {
    const NodeGroup& g = groups[size_t(k)];
    auto env = [&](const char* name) {
      const char* v = std::getenv((std::string(name) + "_HET_GROUP_" + str(k)).c_str());
      return v ? std::atoi(v) : -1;
    };
    const int nodes = env("SLURM_JOB_NUM_NODES"), tasks = env("SLURM_NTASKS");
    if (nodes >= 0 && nodes != g.nodes)
      throw ConfigError("Slurm het component " + str(k) + " has " + str(nodes) + " node" +
                        (nodes == 1 ? "" : "s") + "; group '" + g.name + "' ([parallel] groups[" +
                        str(k) + "]) has nodes=" + str(g.nodes));
    if (tasks >= 0 && tasks != g.nodes * nproc)
      throw ConfigError("Slurm het component " + str(k) + " runs " + str(tasks) +
                        " tasks; group '" + g.name + "' needs nodes " + str(g.nodes) + " x nproc " +
                        str(nproc) + " = " + str(g.nodes * nproc));
  }
}

std::string describe_groups(const std::vector<NodeGroup>& groups, int nproc, int world, int pp) {
  std::string out;
  int node = 0, rank = 0;
  const int per_stage = world / pp;
  auto span = [](int a, int b) { return a == b ? str(a) : str(a) + "-" + str(b); };
  for (const NodeGroup& g : groups) {
    const int ranks = g.nodes * nproc;
    out += (out.empty() ? "" : "; ") + g.name + ": node" + (g.nodes > 1 ? "s " : " ") +
           span(node, node + g.nodes - 1) + (ranks > 1 ? " (ranks " : " (rank ") +
           span(rank, rank + ranks - 1) + ", stage" + (ranks > per_stage ? "s " : " ") +
           span(rank / per_stage, (rank + ranks - 1) / per_stage);
    if (g.threads >= 0) out += ", threads " + str(g.threads);
    if (!g.device.empty()) out += ", device " + g.device;
    out += ")";
    node += g.nodes, rank += ranks;
  }
  return out;
}

}  // namespace loom::dist
