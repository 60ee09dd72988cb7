// Runs a piece of code that may crash or hang (opening a stranger's shared library) in a forked
// child, so that a damaged library costs an error message instead of the process.
#pragma once

#include <functional>
#include <string>

namespace loom::plugins {

// Forks; the child runs `work` and sends back the string it returns (or the message of what it
// threw), then exits without running destructors or atexit handlers. Returns that string. Throws
// RuntimeError naming `what` when the child dies by a signal, exits early, or runs past
// timeout_ms (it is then killed). A thrown exception's message comes back as a RuntimeError too.
std::string run_isolated(const std::string& what, const std::function<std::string()>& work,
                         int timeout_ms);

}  // namespace loom::plugins
