// Shared command-line parsing: Boost.Program_options with errors turned into UsageError.
#pragma once

#include <boost/program_options.hpp>
#include <iostream>
#include <string>

#include "cli/commands.hpp"
#include "core/errors.hpp"

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
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nusage: " + synopsis);
  }
  return true;
}

// The --set option every config-taking command accepts.
inline void add_set_option(po::options_description& opts) {
  opts.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                     "override a config key: section.key=value (repeatable)");
}

inline std::vector<std::string> sets(const po::variables_map& vm) {
  return vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

}  // namespace loom::cli
