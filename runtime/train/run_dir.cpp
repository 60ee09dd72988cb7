#include "train/run_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/format.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "loader/services.hpp"
#include "train/metrics.hpp"
#include "train/settings.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

// An exclusive flock on DIR/.lock with "pid host" in the file, held until the process exits.
void lock_dir(const fs::path& dir, const std::string& what, const std::string& way_out) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(what + " '" + dir.string() + "' cannot be written: " + ec.message());
  const fs::path lock = dir / ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("cannot open '" + lock.string() + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ::close(fd);
    throw ConfigError(what + " '" + dir.string() + "' is in use by another job (pid and host: " +
                      who + "); " + way_out + ", or wait for it to end");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = std::to_string(::getpid()) + " " + host + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw RuntimeError("cannot write '" + lock.string() + "': " + std::strerror(errno));
  // fd stays open, and the lock held, until the process exits.
}

bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// A run that starts fresh would truncate an earlier run's metrics.jsonl and replace its
// checkpoints step by step: refused, with the two ways to go on.
void refuse_earlier_run(const fs::path& run_dir, const ckpt::CheckpointSettings& c,
                        const fs::path& root) {
  if (!c.resume.empty()) return;
  const std::string held = c.every > 0 ? ckpt::existing_checkpoints(root) : "";
  std::error_code ec;
  const auto metrics = fs::file_size(run_dir / "metrics.jsonl", ec);
  const bool recorded = !ec && metrics > 0;
  if (held.empty() && !recorded) return;
  const bool own_root = same_dir(root, run_dir / "checkpoints");
  std::vector<std::string> found;
  if (recorded)
    found.push_back("run directory '" + run_dir.string() +
                    "' holds an earlier run's metrics.jsonl" +
                    (own_root && !held.empty() ? " and checkpoints (" + held + ")" : ""));
  if (!held.empty() && (!recorded || !own_root))
    found.push_back("[checkpoint] dir '" + root.string() + "' holds checkpoints (" + held + ")");
  const std::string what = found.size() == 1 ? found[0] : found[0] + ", and " + found[1];
  const std::string elsewhere = held.empty() || own_root ? "--run-dir"
                                : recorded               ? "--run-dir and [checkpoint] dir"
                                                         : "[checkpoint] dir";
  throw ConfigError(what +
                    ", and this run starts fresh ([checkpoint] resume = \"\"): it would overwrite "
                    "them. Continue it "
                    "with --set checkpoint.resume=auto, or give this run another " +
                    elsewhere + " (or move the old ones away)");
}

}  // namespace

void claim_run_dir(const fs::path& run_dir, const ckpt::CheckpointSettings& c) {
  if (std::getenv("LOOM_RUN_DIR_LOCKED")) return;
  lock_dir(run_dir, "run directory", "give this one another --run-dir");
  const fs::path root = c.dir.empty() ? run_dir / "checkpoints" : fs::path(c.dir);
  if (!c.dir.empty() && c.every > 0 && !same_dir(root, run_dir))  // a job that saves there owns it
    lock_dir(root, "checkpoint directory", "give this one another [checkpoint] dir");
  refuse_earlier_run(run_dir, c, root);
}

void write_plugins_record(const fs::path& run_dir, const plugins::Selection& selection) {
  std::string out = "{\"plugins\": [";
  for (size_t i = 0; i < selection.slots.size(); ++i) {
    const plugins::SlotChoice& c = selection.slots[i];
    const loom_plugin* d = c.found.desc;
    out += std::string(i ? ",\n  " : "\n  ") + "{\"slot\": " + json_quote(c.slot) +
           ", \"name\": " + json_quote(d->name) +
           ", \"version\": " + json_quote(d->version ? d->version : "") + ", \"abi\": \"" +
           std::to_string(d->v.major) + "." + std::to_string(d->v.minor) +
           "\", \"library\": " + json_quote(c.found.library.string()) + "}";
  }
  write_checked(run_dir / "plugins.json", out + "\n]}\n");
}

fs::path default_run_dir(const JobSettings& job) {
  if (!job.run.dir.empty()) return job.run.dir;
  return fs::path("runs") / (job.run.name.empty() ? job.name : job.run.name);
}

}  // namespace loom::train
