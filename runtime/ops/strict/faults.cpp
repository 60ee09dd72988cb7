#include "ops/strict/faults.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops/strict/memory.hpp"

namespace loom::strict {

namespace {

thread_local const char* t_running = nullptr;

bool is_runtime_object(const char* path) {
  const char* base = std::strrchr(path, '/');
  const std::string object = base ? base + 1 : path;
  return object.rfind("libloom-runtime", 0) == 0 || object == "loom";
}

// Frames that are not "the code that broke the contract": the C and C++ libraries, OpenMP,
// OpenBLAS, and the strict device itself.
bool is_bystander(const Dl_info& info) {
  if (!info.dli_fname) return true;
  for (const char* lib :
       {"libc.so", "libstdc++", "libgcc_s", "libgomp", "libopenblas", "ld-linux", "linux-vdso"})
    if (std::strstr(info.dli_fname, lib)) return true;
  // A runtime frame without a name is a local function (the strict device's own entries among
  // them), and its named caller says more; a plugin's (hidden symbols) is the plugin.
  if (!info.dli_sname) return is_runtime_object(info.dli_fname);
  return std::strncmp(info.dli_sname, "_ZN4loom6strict", 15) == 0;
}

// "libloom_x.so (f)", or "the runtime (loom::gpt::RopeTables::RopeTables(...))".
std::string describe_code(const Dl_info& info) {
  std::string function;
  if (info.dli_sname) {
    int status = 0;
    char* plain = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    function = status == 0 && plain ? plain : info.dli_sname;
    std::free(plain);
  }
  const char* base = std::strrchr(info.dli_fname, '/');
  std::string object = base ? base + 1 : info.dli_fname;
  if (object.rfind("libloom-runtime", 0) == 0 || object == "loom") object = "the runtime";
  return function.empty() ? object : object + " (" + function + ")";
}

std::string owner_of(void* faulting_pc) {
  Dl_info info{};
  if (faulting_pc && dladdr(faulting_pc, &info) && !is_bystander(info)) return describe_code(info);
  return calling_code();
}

void write_err(const std::string& s) {
  const ssize_t ignored = write(STDERR_FILENO, s.data(), s.size());
  (void)ignored;
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const void* addr = info->si_addr;
  const FaultAddress kind = classify_fault_address(addr);
  if (kind == FaultAddress::other || kind == FaultAddress::unknown) {
    signal(sig, SIG_DFL);  // not ours (or the allocator itself crashed): the default action when
                           // the instruction runs again
    return;
  }
  const bool device = kind == FaultAddress::device;
  void* pc = nullptr;
#if defined(__x86_64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#else
  (void)context;
#endif
  std::string who = running_op() ? std::string("op '") + running_op() + "' on a stream worker"
                                 : "host code in " + owner_of(pc);
  std::string what =
      device ? who + " dereferenced device memory (" + describe_device_address(addr) +
                   "): a device buffer reaches the host only through the op table's copy"
             : who +
                   " touched a pinned buffer while a copy into it was in flight: wait on the copy "
                   "(sync_event on an event recorded after it, or synchronize) before reading it";
  contract_broken(what);
}

}  // namespace

// Installed again on every call: a test framework or a library may have put its own in between.
// The handler is best effort: it allocates and walks the stack (backtrace is called here once so
// that its first use, which loads libgcc_s, is not in the handler), then ends the process.
void install_fault_handler() {
  static const int warmed = [] {
    void* frame[1];
    return backtrace(frame, 1);
  }();
  (void)warmed;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, nullptr);
  sigaction(SIGBUS, &sa, nullptr);
}

std::string calling_code() {
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    if (dladdr(frames[i], &info) && !is_bystander(info)) return describe_code(info);
  }
  return "unknown code";
}

void contract_broken(const std::string& what) {
  write_err("loom: error: strict device: " + what + "\n");
  void* frames[48];
  const int n = backtrace(frames, 48);
  write_err("loom: the host stack at the fault:\n");
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::_Exit(1);
}

void set_running_op(const char* op) { t_running = op; }

const char* running_op() { return t_running; }

}  // namespace loom::strict
