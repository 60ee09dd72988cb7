// How many threads a step uses when other processes share the cores. OpenMP's barriers wait for
// the slowest thread; a thread that shares its core with a busy process is descheduled for whole
// timeslices, and every kernel waits for it (the demo step went 3.7x slower beside one busy
// process on 2 cores, 12x beside two). Waiting passively instead costs 2.5x on a quiet machine.
// So the step keeps all cores while they are free, and every few steps counts the cores other
// processes used (from /proc/stat, less this process's own CPU time); when they take some, it
// trains on the cores left, and takes them back when they are free again.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace loom::train {

class ThreadPolicy {
 public:
  // adaptive: [run] threads = 0 on a machine with one rank (with several ranks per node the
  // other ranks are "other processes" too, so the count stays fixed); threads: the count now.
  // It looks every `every` steps, once `min_window_s` has passed since the last look: /proc/stat
  // counts in 10 ms ticks per core, so a window of a few ticks reads a busy core as free or a free
  // one as busy, and the count would flap between looks; ten ticks keep the error near 0.2 cores.
  ThreadPolicy(std::string device, int threads, bool adaptive, bool verbose, int64_t every = 5,
               double min_window_s = 0.1);
  // After each step; may change the thread count for the next ones. Returns the count in use.
  int after_step();

 private:
  struct Sample {
    std::chrono::steady_clock::time_point wall;
    double busy_s = 0, own_s = 0;  // all cores' busy time, this process's CPU time
  };
  static Sample sample();
  std::string device_;
  int max_threads_, threads_;
  bool adaptive_, verbose_;
  int64_t steps_ = 0, every_;
  double min_window_s_;
  Sample last_;
};

}  // namespace loom::train
