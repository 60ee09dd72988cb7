#include "train/thread_policy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include "ops/ops.hpp"

namespace loom::train {

ThreadPolicy::ThreadPolicy(std::string device, int threads, bool adaptive, bool verbose,
                           int64_t every, double min_window_s)
    : device_(std::move(device)),
      max_threads_(threads),
      threads_(threads),
      adaptive_(adaptive && threads > 1),
      verbose_(verbose),
      every_(every),
      min_window_s_(min_window_s),
      last_(sample()) {}

// /proc/stat's first line: jiffies of all cores in user, nice, system, idle, iowait, irq,
// softirq, steal; busy = all but idle and iowait.
ThreadPolicy::Sample ThreadPolicy::sample() {
  Sample s;
  s.wall = std::chrono::steady_clock::now();
  std::ifstream stat("/proc/stat");
  std::string cpu;
  double v[8] = {0};
  stat >> cpu;
  for (double& x : v) stat >> x;
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  s.busy_s = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / hz;
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  s.own_s = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  return s;
}

int ThreadPolicy::after_step() {
  if (!adaptive_ || ++steps_ % every_ != 0) return threads_;
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_.wall).count() <
      min_window_s_)
    return threads_;
  const Sample now = sample();
  const double wall = std::chrono::duration<double>(now.wall - last_.wall).count();
  // Cores other processes kept busy over the window (our own spinning threads are ours).
  const double others =
      wall > 0 ? std::max(0.0, (now.busy_s - last_.busy_s) - (now.own_s - last_.own_s)) / wall : 0;
  last_ = now;
  const int want =
      std::clamp(max_threads_ - static_cast<int>(std::lround(others)), 1, max_threads_);
  if (want != threads_) {
    if (verbose_)
      std::printf(
          "threads: %d -> %d (other processes kept %.1f of %d cores busy over the last %lld "
          "steps)\n",
          threads_, want, others, max_threads_, static_cast<long long>(every_));
    threads_ = ops::set_threads(device_, want);
  }
  return threads_;
}

}  // namespace loom::train
