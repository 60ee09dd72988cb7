#include "distributed/launch.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/errors.hpp"
#include "distributed/network.hpp"

namespace loom::dist {

namespace {

// A launcher variable as an integer; anything else is an error naming it. `prefix` takes the
// leading number of a list such as SLURM_STEP_TASKS_PER_NODE ("2(x3),1").
std::optional<int> env_int(const char* name, bool prefix = false) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (end == v || (!prefix && *end) || errno == ERANGE || x < INT_MIN || x > INT_MAX)
    throw UsageError(std::string("launcher variable ") + name + " = \"" + v +
                     "\" is not an integer");
  return static_cast<int>(x);
}

// Every rank variable in range, before anything divides by a world size or waits on a rank
// that cannot exist.
void check_ranks(const RankEnv& e, const char* rank, const char* world, const char* local_rank,
                 const char* local_world) {
  auto fail = [](const std::string& what) { throw UsageError("launcher variables: " + what); };
  if (e.world < 1) fail(std::string(world) + " = " + std::to_string(e.world) + " (at least 1)");
  if (e.rank < 0 || e.rank >= e.world)
    fail(std::string(rank) + " = " + std::to_string(e.rank) + " is not in [0, " + world + " = " +
         std::to_string(e.world) + ")");
  if (e.local_world < 1)
    fail(std::string(local_world) + " = " + std::to_string(e.local_world) + " (at least 1)");
  if (e.local_rank < 0 || e.local_rank >= e.local_world)
    fail(std::string(local_rank) + " = " + std::to_string(e.local_rank) + " is not in [0, " +
         local_world + " = " + std::to_string(e.local_world) + ")");
  if (e.master_port < 1 || e.master_port > 65535)
    fail("MASTER_PORT = " + std::to_string(e.master_port) + " (1-65535)");
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

volatile std::sig_atomic_t g_stop_signal = 0, g_signals = 0;
void on_signal(int s) {
  g_stop_signal = s;
  g_signals = g_signals + 1;
}

// How long ranks asked to stop by a signal get to finish their step and save a checkpoint
// (LOOM_STOP_GRACE_S, default 120 s: Slurm's --signal=B:TERM@120) before they are killed.
std::chrono::seconds stop_grace() {
  const char* v = std::getenv("LOOM_STOP_GRACE_S");
  char* end = nullptr;
  const long s = v ? std::strtol(v, &end, 10) : 120;
  if (v && (end == v || *end || s < 0))
    throw UsageError(std::string("LOOM_STOP_GRACE_S = '") + v + "' is not a number of seconds");
  return std::chrono::seconds(s);
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout+stderr
  std::string pending;
  bool exited = false;
  int status = 0;
};

void flush_lines(int rank, Child& c, bool all) {
  size_t nl;
  while ((nl = c.pending.find('\n')) != std::string::npos) {
    std::printf("[rank %d] %s\n", rank, c.pending.substr(0, nl).c_str());
    c.pending.erase(0, nl + 1);
  }
  if (all && !c.pending.empty()) {
    std::printf("[rank %d] %s\n", rank, c.pending.c_str());
    c.pending.clear();
  }
  std::fflush(stdout);
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended abnormally";
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }
// Exit 3 is a loom rank that stopped on a signal after a whole step (and saved it). When every
// rank of the node exits so, whichever process the signal reached, the job was preempted.
constexpr int kStoppedOnSignal = 3;
bool stopped(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == kStoppedOnSignal; }
// Of two failures seen in one sweep, the one to name: an error over a stop, a signal over an exit.
bool more_telling(int a, int b) {
  if (stopped(b) != stopped(a)) return stopped(b);
  return WIFSIGNALED(a) && !WIFSIGNALED(b);
}

}  // namespace

std::optional<RankEnv> rank_from_environment() {
  RankEnv e;
  const char* names[4] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  if (auto r = env_int("RANK")) {
    e.rank = *r;
    e.world = env_int("WORLD_SIZE").value_or(1);
    e.local_rank = env_int("LOCAL_RANK").value_or(e.rank);
    e.local_world = env_int("LOCAL_WORLD_SIZE").value_or(e.world);
    e.launcher = std::getenv("LOOM_LAUNCHED") ? "loom" : "torchrun";
  } else if (env_int("WORLD_SIZE")) {
    throw UsageError("launcher variables: WORLD_SIZE is set but RANK is not");
  } else if (auto r = env_int("OMPI_COMM_WORLD_RANK")) {
    e.rank = *r;
    e.world = env_int("OMPI_COMM_WORLD_SIZE").value_or(1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    e.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
    e.launcher = "mpi";
    names[0] = "OMPI_COMM_WORLD_RANK", names[1] = "OMPI_COMM_WORLD_SIZE";
    names[2] = "OMPI_COMM_WORLD_LOCAL_RANK", names[3] = "OMPI_COMM_WORLD_LOCAL_SIZE";
  } else if (auto r = env_int("SLURM_PROCID"); r && env_int("SLURM_NTASKS")) {
    e.rank = *r;
    e.world = *env_int("SLURM_NTASKS");
    e.local_rank = env_int("SLURM_LOCALID").value_or(0);
    // SLURM_NTASKS_PER_NODE is set only when asked for; SLURM_STEP_TASKS_PER_NODE always is
    // ("2(x3),1": its first count, which is enough to share a node's cores between its ranks).
    e.local_world = env_int("SLURM_NTASKS_PER_NODE")
                        .value_or(env_int("SLURM_STEP_TASKS_PER_NODE", true).value_or(e.world));
    e.launcher = "slurm";
    names[0] = "SLURM_PROCID", names[1] = "SLURM_NTASKS", names[2] = "SLURM_LOCALID",
    names[3] = "SLURM_NTASKS_PER_NODE";
  } else {
    return std::nullopt;
  }
  e.master_addr = env_str("MASTER_ADDR", "127.0.0.1");
  e.master_port = env_int("MASTER_PORT").value_or(29500);
  // Every rank of one job shares its launcher's job id (and Slurm step), and concurrent jobs
  // differ in it: a port hashed from it keeps two jobs on one node off each other's store. The
  // range 20000-32767 stays below Linux's ephemeral ports.
  if (!std::getenv("MASTER_PORT")) {
    std::string job;
    if (e.launcher == "mpi")
      job = env_str("OMPI_MCA_ess_base_jobid", env_str("PMIX_NAMESPACE", ""));
    if (e.launcher == "slurm")
      job = env_str("SLURM_JOB_ID", "") + "." + env_str("SLURM_STEP_ID", "");
    if (!job.empty()) e.master_port = port_for_job(job);
  }
  if (e.launcher == "slurm" && !std::getenv("MASTER_ADDR")) {
    // The store lives on the allocation's first host.
    const std::string nodes = env_str("SLURM_STEP_NODELIST", env_str("SLURM_JOB_NODELIST", ""));
    if (!nodes.empty()) e.master_addr = first_host(nodes);
  }
  check_ranks(e, names[0], names[1], names[2], names[3]);
  return e;
}

// FNV-1a of the job's name, folded into [20000, 32768).
int port_for_job(const std::string& job) {
  uint32_t h = 2166136261u;
  for (unsigned char c : job) h = (h ^ c) * 16777619u;
  return 20000 + static_cast<int>(h % 12768);
}

// "gpu-a[07-09,12],login1" -> "gpu-a07": the first entry, its first range's first number with
// the range's zero padding.
std::string first_host(const std::string& nodelist) {
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string entry = nodelist.substr(0, end);
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  const size_t close = entry.find(']', open);
  const std::string ranges =
      entry.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
  const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
  const std::string suffix = close == std::string::npos ? "" : entry.substr(close + 1);
  return entry.substr(0, open) + first +
         (suffix.empty() ? "" : first_host(suffix));  // "r[1-2]-n[01-04]"
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw RuntimeError("cannot find a free port on 127.0.0.1");
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int inherited_store_fd() {
  auto fd = env_int("LOOM_STORE_FD");
  return fd && env_int("RANK").value_or(-1) == 0 ? *fd : -1;
}

namespace {

// A socket listening on 0.0.0.0 (every interface: other nodes reach it by MASTER_ADDR) at *port,
// or at a port the kernel picks when *port is 0; close-on-exec except for rank 0.
int listen_any_port(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(*port));
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd, 1024) != 0)
    throw RuntimeError(std::string("launcher: cannot open the store's socket") +
                       (*port ? " on port " + std::to_string(*port) + " (MASTER_PORT)" : "") +
                       ": " + std::strerror(errno));
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// What every rank of this node starts with.
struct Launch {
  int nproc = 1, first_rank = 0, world = 1;
  int port = 0, store_fd = -1;  // store_fd: node 0's listening socket, handed to rank 0
  std::string addr;
  std::string on_host;  // " on node1": which node's launcher speaks, when there are several
};

Launch prepare_launch(const NodeSpec& node) {
  if (node.nnodes > 1 && !std::getenv("MASTER_ADDR"))
    throw UsageError("a launch over " + std::to_string(node.nnodes) +
                     " nodes needs MASTER_ADDR: node 0's address, "
                     "reachable from every node");
  Launch l;
  l.nproc = node.nproc, l.first_rank = node.node_rank * node.nproc,
  l.world = node.nnodes * node.nproc;
  // One node: any free port. Several: the agreed MASTER_PORT, and only node 0 opens it.
  l.port = node.nnodes > 1 ? env_int("MASTER_PORT").value_or(29500) : 0;
  l.store_fd = node.node_rank == 0 ? listen_any_port(&l.port) : -1;
  l.addr = env_str("MASTER_ADDR", "127.0.0.1");
  l.on_host = node.nnodes > 1 ? " on " + host_name() : "";
  return l;
}

void catch_stop_signals() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
}

// The child's side of the fork: dies with the launcher, writes stdout and stderr into `out`.
[[noreturn]] void exec_rank(const Launch& l, int r, int out, pid_t launcher,
                            const std::vector<std::string>& argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);
  ::dup2(out, 1);  // dup2 clears close-on-exec on 1 and 2
  ::dup2(out, 2);
  setenv("RANK", std::to_string(l.first_rank + r).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(l.world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(l.nproc).c_str(), 1);
  setenv("MASTER_ADDR", l.addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(l.port).c_str(), 1);
  setenv("LOOM_LAUNCHED", "1", 1);
  if (r == 0 && l.store_fd >= 0) {  // rank 0 hosts the store on the socket opened above
    ::fcntl(l.store_fd, F_SETFD, 0);
    setenv("LOOM_STORE_FD", std::to_string(l.store_fd).c_str(), 1);
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(argv[0].c_str(),
           args.data());  // a bare name (`loom launch -- python3`) is looked up in PATH
  std::fprintf(stderr, "cannot start %s: %s\n", argv[0].c_str(), std::strerror(errno));
  _exit(127);
}

std::vector<Child> start_ranks(const Launch& l, const std::vector<std::string>& argv) {
  std::vector<Child> kids(l.nproc);
  const pid_t launcher = getpid();
  for (int r = 0; r < l.nproc; ++r) {
    int fds[2];
    // Close-on-exec: no rank inherits the read ends of the others' pipes.
    if (::pipe2(fds, O_CLOEXEC) != 0) throw RuntimeError("launcher: pipe failed");
    pid_t pid = ::fork();
    if (pid < 0) throw RuntimeError("launcher: fork failed");
    if (pid == 0) exec_rank(l, r, fds[1], launcher, argv);
    ::close(fds[1]);
    if (r == 0 && l.store_fd >= 0) ::close(l.store_fd);  // rank 0 has it now
    kids[r].pid = pid;
    kids[r].out = fds[0];
  }
  return kids;
}

// One read from a rank's pipe that poll said is ready; end of file closes it.
void read_ready(Child& k, int rank) {
  char buf[8192];
  ssize_t n = ::read(k.out, buf, sizeof buf);
  if (n > 0) {
    k.pending.append(buf, n);
    flush_lines(rank, k, false);
  } else {
    flush_lines(rank, k, true);
    ::close(k.out);
    k.out = -1;
  }
}

// Whatever the ranks wrote just before exiting is still in the pipes. Non-blocking: a
// grandchild that kept the pipe open must not keep the launcher waiting.
void drain_output(std::vector<Child>& kids, int first_rank) {
  for (size_t r = 0; r < kids.size(); ++r) {
    Child& k = kids[r];
    char buf[8192];
    ssize_t n;
    if (k.out >= 0) ::fcntl(k.out, F_SETFL, ::fcntl(k.out, F_GETFL) | O_NONBLOCK);
    while (k.out >= 0 && (n = ::read(k.out, buf, sizeof buf)) > 0) k.pending.append(buf, n);
    if (k.out >= 0) ::close(k.out);
    k.out = -1;
    flush_lines(first_rank + static_cast<int>(r), k, true);
  }
}

// A process that cannot run: stopped (SIGSTOP, a debugger) or in uninterruptible sleep, read from
// /proc/PID/stat's state letter. "" when it can run, or is gone.
std::string frozen_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  switch (stat[paren + 2]) {
    case 'T':
      return "state T: stopped by a signal";
    case 't':
      return "state t: stopped by a debugger";
    case 'D':
      return "state D: waiting on the kernel (a hung filesystem or device)";
  }
  return "";
}

// Watches a node's ranks until all have exited: relays their output, and on the first failure,
// a stop signal or a failure on another node, stops the rest.
class Supervisor {
 public:
  Supervisor(const NodeSpec& node, const Launch& l, std::vector<Child>& kids)
      : node_(node), l_(l), kids_(kids), live_(l.nproc) {}

  void run() {
    while (live_ > 0) {
      relay_output();
      const int culprit = reap_exited();
      if (culprit >= 0 && first_failed_ < 0 && !stopping_) failure_or_stop(culprit);
      if (stopped_rank_ >= 0 && first_failed_ < 0 && !stopping_ && !all_stopped() &&
          std::chrono::steady_clock::now() - stopped_at_ > std::chrono::seconds(2))
        report_failure(stopped_rank_);  // the others did not follow: exit 3 was a failure after all
      terminate_after_failure();
      stop_on_signal();
      stop_if_peers_failed();
      const auto grace = by_signal_ ? signal_grace_ : std::chrono::seconds(7);
      if (stopping_ && (std::chrono::steady_clock::now() - stop_started_ > grace || g_signals > 1))
        stop_all(SIGKILL);
    }
  }

  // The job's exit code once every rank has exited and its output is drained.
  int job_status() const {
    if (first_failed_ >= 0) {
      const int status = kids_[first_failed_].status;
      std::string what = "rank " + std::to_string(l_.first_rank + first_failed_) + l_.on_host +
                         " " + describe_exit(status);
      if (frozen_rank_ >= 0)
        what = "rank " + std::to_string(l_.first_rank + frozen_rank_) + l_.on_host +
               " was frozen (" + frozen_why_ + ") and stopped answering; " + what +
               " waiting for it";
      std::fprintf(stderr, "loom: job failed: %s\n", what.c_str());
      if (node_.failure) *node_.failure = what;
      // A rank that rejected its configuration keeps the usage/config exit code.
      return WIFEXITED(status) && WEXITSTATUS(status) == 2 ? 2 : 1;
    }
    if (peer_stop_) {
      if (node_.failure) *node_.failure = "stopped because a rank on another node failed";
      return 1;
    }
    // Ranks that all stopped cleanly on a signal (exit 3), whether it reached this launcher
    // (which forwarded it) or one rank (which the others followed after the same step), make the
    // job's status 3, so a requeue script can tell a preemption from a failure.
    if (all_stopped()) return kStoppedOnSignal;
    return g_stop_signal ? 1 : 0;
  }

 private:
  void stop_all(int sig) {
    for (auto& k : kids_)
      if (!k.exited) ::kill(k.pid, sig);
  }

  void relay_output() {
    std::vector<pollfd> fds;
    std::vector<int> owner;
    for (int r = 0; r < l_.nproc; ++r)
      if (kids_[r].out >= 0) fds.push_back({kids_[r].out, POLLIN, 0}), owner.push_back(r);
    if (!fds.empty())
      ::poll(fds.data(), fds.size(), 100);
    else
      ::usleep(100 * 1000);
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        read_ready(kids_[owner[i]], l_.first_rank + owner[i]);
  }

  // Reaps everything that exited since the last sweep, and names one failure: a rank killed by
  // a signal is the cause when its peers exited with errors about losing it in the same sweep.
  int reap_exited() {
    int culprit = -1;
    for (int r = 0; r < l_.nproc; ++r) {
      Child& k = kids_[r];
      if (k.exited || ::waitpid(k.pid, &k.status, WNOHANG) != k.pid) continue;
      k.exited = true;
      --live_;
      if (failed(k.status) && (culprit < 0 || more_telling(k.status, kids_[culprit].status)))
        culprit = r;
    }
    return culprit;
  }

  // After a failure the others get a moment to fail on their own (a peer lost mid-collective
  // fails within milliseconds) and say what they saw, before they are stopped.
  bool all_stopped() const {
    return std::all_of(kids_.begin(), kids_.end(),
                       [](const Child& k) { return k.exited && stopped(k.status); });
  }

  // A rank that exited 3 may be the first of a preemption the others follow within the step;
  // anything else is a failure now.
  void failure_or_stop(int culprit) {
    if (!stopped(kids_[culprit].status)) return report_failure(culprit);
    if (stopped_rank_ < 0) stopped_rank_ = culprit, stopped_at_ = std::chrono::steady_clock::now();
  }

  void report_failure(int culprit) {
    first_failed_ = culprit;
    // A rank that times out waiting for a frozen peer is not the cause: the frozen one is. The
    // state must hold over half a second: a rank can pass through D briefly (a page fault, a
    // write).
    for (int r = 0; r < l_.nproc && frozen_rank_ < 0; ++r) {
      if (r == culprit || kids_[r].exited || frozen_state(kids_[r].pid).empty()) continue;
      ::usleep(500 * 1000);
      if (!(frozen_why_ = frozen_state(kids_[r].pid)).empty()) frozen_rank_ = r;
    }
    std::fprintf(stderr, "loom: rank %d%s %s; stopping the other ranks\n", l_.first_rank + culprit,
                 l_.on_host.c_str(), describe_exit(kids_[culprit].status).c_str());
    stopping_ = true;
    stop_started_ = std::chrono::steady_clock::now();
  }

  void terminate_after_failure() {
    if (first_failed_ >= 0 && !terminated_ &&
        std::chrono::steady_clock::now() - stop_started_ > std::chrono::seconds(2)) {
      terminated_ = true;
      stop_all(SIGTERM);
    }
  }

  void stop_on_signal() {
    if (!g_stop_signal || stopping_) return;
    std::fprintf(stderr,
                 "loom: received %s; the ranks stop after their current step (again to stop now)\n",
                 strsignal(g_stop_signal));
    stopping_ = terminated_ = by_signal_ = true;
    stop_started_ = std::chrono::steady_clock::now();
    stop_all(SIGTERM);
  }

  void stop_if_peers_failed() {
    if (!node_.peers_failed || stopping_ ||
        std::chrono::steady_clock::now() - last_poll_ <= std::chrono::milliseconds(500))
      return;
    last_poll_ = std::chrono::steady_clock::now();
    if (!node_.peers_failed()) return;
    // Their peers are gone: nothing they could still do (a step, a save) can complete.
    std::fprintf(stderr, "loom: a rank on another node failed; stopping this node's ranks\n");
    stopping_ = terminated_ = peer_stop_ = true;
    stop_started_ = last_poll_;
    stop_all(SIGKILL);
  }

  const NodeSpec& node_;
  const Launch& l_;
  std::vector<Child>& kids_;
  int first_failed_ = -1, live_;
  int frozen_rank_ = -1;  // a rank that could not run when the first failure came: the likely cause
  std::string frozen_why_;
  int stopped_rank_ = -1;  // the first rank that exited 3, while the others may still follow
  std::chrono::steady_clock::time_point stopped_at_;
  bool stopping_ = false, terminated_ = false, by_signal_ = false, peer_stop_ = false;
  std::chrono::steady_clock::time_point last_poll_ = std::chrono::steady_clock::now();
  const std::chrono::seconds signal_grace_ = stop_grace();
  std::chrono::steady_clock::time_point stop_started_ = std::chrono::steady_clock::now();
};

}  // namespace

int spawn_local(int nproc, const std::vector<std::string>& argv) {
  return spawn_node({nproc, 1, 0}, argv);
}

int spawn_node(const NodeSpec& node, const std::vector<std::string>& argv) {
  const Launch launch = prepare_launch(node);
  catch_stop_signals();
  std::vector<Child> kids = start_ranks(launch, argv);
  Supervisor supervisor(node, launch, kids);
  supervisor.run();
  drain_output(kids, launch.first_rank);
  return supervisor.job_status();
}

}  // namespace loom::dist
