// loom: the command-line entry point. Maps each failure class to its exit code.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>

#include "cli/commands.hpp"
#include "core/errors.hpp"
#include "distributed/network.hpp"

namespace loom::cli {
namespace {
std::vector<std::string>& invocation() {
  static std::vector<std::string> v;
  return v;
}
}  // namespace
void set_invocation(int argc, char** argv) { invocation().assign(argv, argv + argc); }
std::vector<std::string> self_invocation() {
  std::vector<std::string> v = invocation();
  if (!v.empty()) v[0] = "/proc/self/exe";
  return v;
}

namespace {

// OpenMP threads that spin long at a barrier hold a core a descheduled team-mate needs: beside one
// busy process the demo step went 1.9x slower with a step up to 6.9x the median, beside bursty
// load up to 1.8x. Spinning 1,000 rounds before sleeping kept the quiet step as it was and those
// to 1.14 and 1.40 (bench/contention.sh, docs/training.md). libgomp reads GOMP_SPINCOUNT when it
// loads, before main, so `loom train` sets it and executes itself again (same pid); a value the
// user set is kept.
void spin_briefly_at_barriers(int argc, char** argv) {
  // libgomp lets GOMP_SPINCOUNT override OMP_WAIT_POLICY: a user's policy is kept as well.
  if (argc < 2 || std::string(argv[1]) != "train" || std::getenv("GOMP_SPINCOUNT") ||
      std::getenv("OMP_WAIT_POLICY"))
    return;
  ::setenv("GOMP_SPINCOUNT", "1000", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then train with libgomp's default
}

}  // namespace
}  // namespace loom::cli

int main(int argc, char** argv) {
  using namespace loom;
  // A peer that dies closes its sockets; writing to them must fail the collective with a message
  // naming it (EPIPE), not kill this rank silently with SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  cli::spin_briefly_at_barriers(argc, argv);
  cli::set_invocation(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(cli::usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  static const std::map<std::string, int (*)(const cli::Args&)> commands = {
      {"version", &cli::version}, {"--version", &cli::version}, {"plugins", &cli::plugins},
      {"config", &cli::config},   {"train", &cli::train},       {"data", &cli::data},
      {"launch", &cli::launch},   {"bench", &cli::bench},       {"compare", &cli::compare},
      {"doctor", &cli::doctor},   {"ckpt", &cli::ckpt_cmd},     {"schedule", &cli::schedule},
      {"model", &cli::model},     {"generate", &cli::generate}, {"plan", &cli::plan_cmd},
      {"eval", &cli::eval},
  };
  std::string name = args[0];
  args.erase(args.begin());
  try {
    auto it = commands.find(name);
    if (it == commands.end()) throw UsageError("unknown command '" + name + "'; see 'loom --help'");
    return it->second(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return kExitUsage;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "loom: config error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: error: %s\n", dist::name_addresses(e.what()).c_str());
    return kExitRuntime;
  }
}
