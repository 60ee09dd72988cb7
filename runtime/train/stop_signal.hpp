// Preemption: SIGTERM or SIGINT asks a run to stop after the current step, save a checkpoint
// when checkpointing is on ([checkpoint] on_signal = "save"), and exit with kExitStopped. Every
// rank must stop after the same step, so the ranks agree on it (a MAX over the world) at the end
// of each step: Ctrl-C reaching one rank stops them all together.
#pragma once

#include <csignal>
#include <string>

namespace loom::dist {
class CommWorld;
}

namespace loom::train {

class StopSignal {
 public:
  // Catches SIGTERM and SIGINT until destroyed. A second signal of the same kind ends the
  // process at once, as it would without this handler.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // True on every rank when any rank received a signal (a collective when world is not null).
  bool agreed(dist::CommWorld* world);
  // "SIGTERM" or "SIGINT": the first signal seen here, or "a signal on another rank".
  std::string name() const;

 private:
  struct sigaction old_term_ {
  }, old_int_{}, old_hup_{};
};

}  // namespace loom::train
