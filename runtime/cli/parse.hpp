// Shared command-line parsing: Boost.Program_options with errors turned into UsageError.
#pragma once

#include <algorithm>
#include <boost/program_options.hpp>
#include <cctype>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.hpp"
#include "core/errors.hpp"
#include "distributed/launch.hpp"

namespace loom::cli {

namespace po = boost::program_options;

// Parses `args`; returns false (after printing help) when --help was given.
inline bool parse(const Args& args, const std::string& synopsis, po::options_description& opts,
                  const po::positional_options_description& positional, po::variables_map& vm) {
  opts.add_options()("help,h", "show this help");
  try {
    po::store(po::command_line_parser(args).options(opts).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << synopsis << "\n\n" << opts << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::required_option& e) {
    // A positional argument has an internal option name; say what the synopsis calls it.
    const std::string name = e.get_option_name().substr(e.get_option_name().find_first_not_of('-'));
    for (unsigned i = 0; i < std::min(positional.max_total_count(), 16u); ++i)
      if (positional.name_for_position(i) == name) {
        std::string upper = name;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        throw UsageError("missing " + upper + "\nusage: " + synopsis);
      }
    throw UsageError(std::string(e.what()) + "\nusage: " + synopsis);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nusage: " + synopsis);
  }
  return true;
}

// A numeric option's value type that refuses what lies outside [lo, hi] (and NaN) when the
// command line is read, naming the option, instead of letting an odd value through:
//   ("rounds", ranged<int64_t>("rounds", 1, 1000)->default_value(1), "...")
template <class T>
po::typed_value<T>* ranged(const std::string& name, T lo, T hi) {
  return po::value<T>()->notifier([name, lo, hi](const T& v) {
    if (!(v >= lo && v <= hi)) {  // NaN fails both
      std::ostringstream range;
      range << "--" << name << " must be a number from " << lo << " to " << hi << ", got " << v;
      throw UsageError(range.str());
    }
  });
}

// The --set option every config-taking command accepts.
// --nnodes and --node-rank: one node's launcher of a job over several (dist::spawn_node).
inline void add_node_options(po::options_description& opts) {
  opts.add_options()("nnodes", po::value<int>()->default_value(1),
                     "nodes the job spans; run this command on each")(
      "node-rank", po::value<int>()->default_value(0),
      "this node's index in [0, nnodes); node 0 hosts the store at MASTER_ADDR");
}

inline dist::NodeSpec node_spec(const po::variables_map& vm, int nproc) {
  dist::NodeSpec n{nproc, vm["nnodes"].as<int>(), vm["node-rank"].as<int>()};
  if (n.nnodes < 1) throw UsageError("--nnodes must be at least 1");
  if (n.node_rank < 0 || n.node_rank >= n.nnodes)
    throw UsageError("--node-rank " + std::to_string(n.node_rank) + " is not in [0, --nnodes " +
                     std::to_string(n.nnodes) + ")");
  return n;
}

inline void add_set_option(po::options_description& opts) {
  opts.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                     "override a config key: section.key=value (repeatable)");
}

inline std::vector<std::string> sets(const po::variables_map& vm) {
  return vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

}  // namespace loom::cli
