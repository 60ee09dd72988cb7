// sync: writes each blob at the step boundary, fsyncs it, and returns. Training waits for the
// disk; nothing is left in flight if the process dies afterwards.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <loom/sdk.hpp>
#include <string>

namespace {

// Writes all of `bytes` to DIR/NAME and fsyncs; throws with the path and errno's text.
void write_file(const std::string& dir, const std::string& name, const void* data, size_t bytes) {
  const std::string path = dir + "/" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw loom::sdk::Error(LOOM_SYSTEM, "cannot create " + path + ": " + std::strerror(errno));
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    ssize_t n = ::write(fd, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "wrote nothing";
      ::close(fd);
      throw loom::sdk::Error(LOOM_SYSTEM, "writing " + path + " failed after " +
                                              std::to_string(done) + " of " +
                                              std::to_string(bytes) + " bytes: " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw loom::sdk::Error(LOOM_SYSTEM, "flushing " + path + " failed: " + std::strerror(errno));
}

struct Sync : loom::sdk::CkptPlugin {
  static constexpr loom::sdk::About about{
      .name = "sync",
      .version = "1.0.0",
      .summary = "checkpoint shards written and fsynced at the step boundary"};

  explicit Sync(const loom::sdk::Context&) {}
  void save(const std::string& dir, const std::string& file, const void* data,
            size_t bytes) override {
    write_file(dir, file, data, bytes);
  }
};

}  // namespace

LOOM_PLUGIN(loom::sdk::ckpt_plugin<Sync>())
