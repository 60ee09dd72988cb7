#include "loader/isolated.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/errors.hpp"

namespace loom::plugins {

namespace {

// The child's answer: one byte, 'o' (ok) or 'e' (error), then the text.
void answer(int fd, char tag, const std::string& text) {
  std::string out = tag + text;
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(fd, out.data() + done, out.size() - done);
    if (n <= 0 && errno != EINTR) break;
    if (n > 0) done += static_cast<size_t>(n);
  }
}

// Reads until the child closes its end or the deadline passes; false on timeout.
bool read_all(int fd, std::string& out, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? false : true;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return std::string("crashed with SIG") + (name ? name : std::to_string(sig).c_str());
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status)) + " before it answered";
}

}  // namespace

std::string run_isolated(const std::string& what, const std::function<std::string()>& work,
                         int timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw RuntimeError("cannot probe " + what + ": pipe: " + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw RuntimeError("cannot probe " + what + ": fork: " + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    try {
      answer(fds[1], 'o', work());
    } catch (const std::exception& e) {
      answer(fds[1], 'e', e.what());
    } catch (...) {
      answer(fds[1], 'e', "an exception that is not a std::exception");
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string reply;
  const bool in_time = read_all(fds[0], reply, timeout_ms);
  ::close(fds[0]);
  if (!in_time) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!in_time)
    throw RuntimeError(what + " did not answer within " + std::to_string(timeout_ms / 1000) +
                       " s (it hangs); it is not loaded");
  if (reply.empty() || !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    throw RuntimeError(what + " " + how_it_ended(status) +
                       " while it was probed in a separate process; it is not loaded");
  if (reply[0] == 'e') throw RuntimeError(reply.substr(1));
  return reply.substr(1);
}

}  // namespace loom::plugins
