#include "train/stop_signal.hpp"

#include <unistd.h>

#include "distributed/comm.hpp"

namespace loom::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  if (g_signal == sig) {  // asked twice: stop now, the way the default action would
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
  static const char note[] = "loom: stopping after the current step (a second signal stops now)\n";
  [[maybe_unused]] ssize_t n = ::write(2, note, sizeof note - 1);
}

}  // namespace

StopSignal::StopSignal() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;  // a blocking read or socket call resumes instead of failing
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGHUP, &sa,
            &old_hup_);  // the terminal or the ssh session went away: save, as on SIGTERM
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
}

bool StopSignal::agreed(dist::CommWorld* world) {
  const bool signalled = g_signal != 0;
  return world ? world->world().any(signalled) : signalled;
}

std::string StopSignal::name() const {
  switch (g_signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal on another rank";
  }
}

}  // namespace loom::train
