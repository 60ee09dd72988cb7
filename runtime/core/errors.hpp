// The three ways a Loom command can fail, each with its exit code.
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace loom {

// Exit codes, the same for every subcommand.
constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;  // the job started and something failed
constexpr int kExitUsage = 2;    // bad command line or bad configuration: nothing ran
constexpr int kExitStopped = 3;  // a signal stopped training after a whole step (saved if on)

// A bad command line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A configuration the schema rejects, or one naming something that does not exist.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Everything else: I/O, a plugin that fails, a peer that dies.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ": <the OS's reason>" for a message about a file operation that just failed (errno).
inline std::string os_reason() {
  return std::string(": ") + (errno ? std::strerror(errno) : "the system gave no reason");
}

}  // namespace loom
