#include "plan/mixed_cluster.hpp"

#include <algorithm>
#include <cstdio>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/nearest.hpp"
#include "plan/cluster_toml.hpp"

namespace loom::plan {

namespace {

using config::KeySpec;
using config::ValueType;
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<KeySpec>& cluster_keys() {
  static const std::vector<KeySpec> keys = {
      {"name", ValueType::String, "\"\"", "short name, shown by loom plan"},
      {"description", ValueType::String, "\"\"", "one line"},
      {"sources", ValueType::StringList, "[]", "where the figures come from"},
  };
  return keys;
}

const std::vector<KeySpec>& group_keys() {
  static const std::vector<KeySpec> keys = {
      {"name", ValueType::String, "\"\"", "the group's name, as [parallel] groups names it"},
      {"cluster", ValueType::String, "\"\"",
       "the uniform cluster file of this group's node kind, relative to this file"},
      {"nodes", ValueType::Int, "0", "nodes in this group", 0, 1e7},
      {"per_node", ValueType::Int, "0", "ranks per node; 0 = the group file's [device] per_node", 0,
       4096},
      {"speed", ValueType::Float, "1",
       "compute at this fraction of the group file's figures (a power cap, a CPU quota)", 0, 1000},
  };
  return keys;
}

const std::vector<KeySpec>& between_keys() {
  static const std::vector<KeySpec> keys = {
      {"kind", ValueType::String, "\"\"",
       "what connects the groups (infiniband, ethernet, loopback)"},
      {"bandwidth_gbps", ValueType::Float, "0",
       "GB/s per device, one way, from one group's device to another's", 0, kInf},
      {"latency_us", ValueType::Float, "0", "one message's latency, us", 0, kInf},
  };
  return keys;
}

// One [[group]] entry, checked against its keys, its cluster file loaded.
NodeGroupKind read_group(toml::table& t, size_t index, const std::string& source,
                         const std::filesystem::path& dir) {
  const std::string label = "[[group]] #" + std::to_string(index + 1);
  config::check_table(t, source + ": " + label, group_keys(), false);
  NodeGroupKind g;
  g.name = t["name"].value<std::string>().value();
  const std::string file = t["cluster"].value<std::string>().value();
  g.nodes = static_cast<int>(t["nodes"].value<int64_t>().value());
  g.speed = t["speed"].value<double>().value();
  const std::string named = source + ": " + label + (g.name.empty() ? "" : " ('" + g.name + "')");
  if (g.name.empty()) throw ConfigError(named + " has no name");
  if (file.empty())
    throw ConfigError(named + " has no cluster file (cluster = \"h100-sxm.toml\": its node kind)");
  if (g.nodes < 1) throw ConfigError(named + " has no nodes (nodes = N, at least 1)");
  if (g.speed <= 0) throw ConfigError(named + ": speed must be above 0");
  const std::filesystem::path path =
      std::filesystem::path(file).is_absolute() ? std::filesystem::path(file) : dir / file;
  if (has_groups(path))
    throw ConfigError(named + ": " + path.string() +
                      " is itself a mixed cluster; a group's file is uniform");
  try {
    g.cluster = load_cluster(path);
  } catch (const ConfigError& e) {
    throw ConfigError(named + ": " + e.what());
  }
  const int per_node = static_cast<int>(t["per_node"].value<int64_t>().value());
  g.per_node = g.cluster.per_node =
      per_node > 0 ? per_node : g.cluster.per_node;  // the links and core sharing see it too
  g.cluster.compute_scale /= g.speed;
  g.cluster.rank_compute_scale /= g.speed;
  return g;
}

}  // namespace

int MixedCluster::devices() const {
  int n = 0;
  for (const NodeGroupKind& g : groups) n += g.devices();
  return n;
}

std::string MixedCluster::describe() const {
  std::string out;
  char b[160];
  for (const NodeGroupKind& g : groups) {
    std::snprintf(b, sizeof b, "%s: %d node%s x %d %s", g.name.c_str(), g.nodes,
                  g.nodes == 1 ? "" : "s", g.per_node, g.cluster.device.c_str());
    out += (out.empty() ? "" : "; ") + std::string(b);
    if (g.speed != 1) std::snprintf(b, sizeof b, " at %.3g speed", g.speed), out += b;
  }
  if (groups.size() > 1) {
    std::snprintf(b, sizeof b, "; between: %s %.3g GB/s, %.3g us", between.kind.c_str(),
                  between.bandwidth / 1e9, between.latency * 1e6);
    out += b;
  }
  return out;
}

bool has_groups(const std::filesystem::path& file) { return has_table_line(file, "[[group]]"); }

MixedCluster parse_mixed_cluster(const std::string& text, const std::string& source,
                                 const std::filesystem::path& dir) {
  toml::table root = parse_cluster_toml(text, source);
  const std::vector<std::string> sections = {"cluster", "group", "between"};
  for (auto&& [key, node] : root) {
    const std::string name(key.str());
    if (std::find(sections.begin(), sections.end(), name) == sections.end())
      throw ConfigError(config::where(node) + ": unknown section '" + name +
                        "' in a mixed cluster file" + did_you_mean(name, sections));
  }
  for (const char* s : {"cluster", "between"}) {
    if (!root.contains(s)) root.insert(s, toml::table{});
    if (!root[s].is_table())
      throw ConfigError(source + ": [" + std::string(s) + "] must be a table");
  }
  config::check_table(*root["cluster"].as_table(), source + ": [cluster]", cluster_keys(), false);
  config::check_table(*root["between"].as_table(), source + ": [between]", between_keys(), false);
  MixedCluster m;
  m.source = source;
  m.name = root["cluster"]["name"].value<std::string>().value();
  m.description = root["cluster"]["description"].value<std::string>().value();
  if (m.name.empty()) throw ConfigError(source + ": [cluster] name is missing");
  toml::array* groups = root["group"].as_array();
  if (!groups || groups->empty() || !groups->is_array_of_tables())
    throw ConfigError(source + ": a mixed cluster lists its node groups as [[group]] tables");
  for (size_t i = 0; i < groups->size(); ++i) {
    m.groups.push_back(read_group(*groups->get(i)->as_table(), i, source, dir));
    for (size_t j = 0; j < i; ++j)
      if (m.groups[j].name == m.groups[i].name)
        throw ConfigError(source + ": two [[group]]s are named '" + m.groups[i].name + "'");
  }
  const toml::table& between = *root["between"].as_table();
  m.between = {between["kind"].value<std::string>().value(),
               between["bandwidth_gbps"].value<double>().value() * 1e9,
               between["latency_us"].value<double>().value() * 1e-6};
  if (m.groups.size() > 1 && m.between.bandwidth <= 0)
    throw ConfigError(
        source +
        ": [between] bandwidth_gbps is missing (GB/s per device from one group to another)");
  return m;
}

MixedCluster load_mixed_cluster(const std::filesystem::path& file) {
  return parse_mixed_cluster(read_cluster_file(file), file.string(), file.parent_path());
}

}  // namespace loom::plan
