// How the strict device reports a broken contract: a message naming the op, and the plugin (or
// the runtime) whose code broke it, then exit 1, as a GPU's illegal address ends the process.
#pragma once

#include <string>

namespace loom::strict {

// SIGSEGV/SIGBUS on a device address or on a pinned block a copy is writing becomes such a
// message; any other fault keeps its default action.
void install_fault_handler();

// The shared object and function of the first caller outside the strict device and the system
// libraries: "libloom_host_touch.so (touch_setup)", or "the runtime (loom::gpt::...)".
std::string calling_code();

[[noreturn]] void contract_broken(const std::string& what);

// The op a stream worker is running on this thread, or nullptr: a fault inside it names the op.
void set_running_op(const char* op);
const char* running_op();

}  // namespace loom::strict
