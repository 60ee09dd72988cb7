// async: save() copies the blob into host staging memory (at most budget_mb in flight) and
// returns; save_stable() takes a buffer the runtime keeps unchanged until finish() and copies
// nothing; a background thread writes and fsyncs either while training goes on. A failed write is
// reported by the next poll(), save() or finish(), never dropped; finish() returns when every
// staged blob is durable, so the runtime commits a checkpoint only after it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <loom/sdk.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Job {
  std::string path;
  std::vector<char> bytes;         // a staged copy, or
  const char* borrowed = nullptr;  // the caller's buffer, stable until finish()
  size_t size() const { return borrowed ? borrowed_bytes : bytes.size(); }
  size_t borrowed_bytes = 0;
  const char* data() const { return borrowed ? borrowed : bytes.data(); }
};

struct Async : loom::sdk::CkptPlugin {
  static constexpr loom_option_spec kOptions[] = {
      {"budget_mb", LOOM_OPT_FLOAT, "4096.0",
       "host staging memory in flight; save() waits beyond it"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{
      .name = "async",
      .version = "1.0.0",
      .summary = "checkpoint shards staged in memory and written in the background",
      .options = kOptions,
      .capabilities = LOOM_CKPT_ASYNC};

  explicit Async(const loom::sdk::Context& ctx)
      : budget_(static_cast<size_t>(ctx.options.f64("budget_mb") * 1048576.0)) {
    if (budget_ == 0) throw loom::sdk::ConfigError("budget_mb must be positive");
    worker_ = std::thread([this] { run(); });
  }

  ~Async() override {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();  // what was staged is still written: the process is leaving normally
  }

  void save(const std::string& dir, const std::string& file, const void* data,
            size_t bytes) override {
    std::unique_lock<std::mutex> lock(m_);
    raise_locked();
    // A blob larger than the whole budget goes alone; otherwise wait for room.
    done_cv_.wait(lock,
                  [&] { return !error_.empty() || staged_ == 0 || staged_ + bytes <= budget_; });
    raise_locked();
    // A buffer from an earlier save is reused when one is large enough: copying into memory
    // already touched costs a memcpy, not a page fault per 4 KiB.
    Job j{dir + "/" + file, {}};
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (it->capacity() >= bytes) {
        j.bytes = std::move(*it);
        spare_.erase(it);
        break;
      }
    lock.unlock();
    j.bytes.resize(bytes);
    if (bytes > 0)
      std::memcpy(j.bytes.data(), data, bytes);  // an empty file: no buffer to copy into
    lock.lock();
    staged_ += bytes;
    queue_.push_back(std::move(j));
    cv_.notify_one();
  }

  // The runtime keeps `data` unchanged until finish(): written from where it is, no copy.
  void save_stable(const std::string& dir, const std::string& file, const void* data,
                   size_t bytes) override {
    std::lock_guard<std::mutex> lock(m_);
    raise_locked();
    Job j{dir + "/" + file, {}, static_cast<const char*>(data), bytes};
    queue_.push_back(std::move(j));
    cv_.notify_one();
  }

  void finish() override {
    std::unique_lock<std::mutex> lock(m_);
    done_cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || !error_.empty(); });
    raise_locked();
  }

  void poll() override {
    std::lock_guard<std::mutex> lock(m_);
    raise_locked();
  }

 private:
  void raise_locked() {
    if (error_.empty()) return;
    std::string e;
    e.swap(error_);
    throw loom::sdk::Error(LOOM_SYSTEM, "background checkpoint write failed: " + e);
  }

  void run() {
    for (;;) {
      Job j;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        j = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      std::string err = write(j);
      {
        std::lock_guard<std::mutex> lock(m_);
        staged_ -= j.bytes.size();
        busy_ = false;
        if (!j.borrowed && spare_.size() < 4) spare_.push_back(std::move(j.bytes));
        if (!err.empty() && error_.empty()) {
          error_ = err;
          for (const Job& rest : queue_) staged_ -= rest.bytes.size();
          queue_.clear();  // the checkpoint is lost anyway; it will not be committed
        }
      }
      done_cv_.notify_all();
    }
  }

  static std::string write(const Job& j) {
    int fd = ::open(j.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return "cannot create " + j.path + ": " + std::strerror(errno);
    for (size_t done = 0; done < j.size();) {
      ssize_t n = ::write(fd, j.data() + done, j.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::string why = n < 0 ? std::strerror(errno) : "wrote nothing";
        ::close(fd);
        return "writing " + j.path + " failed after " + std::to_string(done) + " of " +
               std::to_string(j.size()) + " bytes: " + why;
      }
      done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0)
      return "flushing " + j.path + " failed: " + std::strerror(errno);
    return "";
  }

  size_t budget_, staged_ = 0;
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  std::deque<Job> queue_;
  std::vector<std::vector<char>> spare_;  // written buffers kept for reuse
  bool stop_ = false, busy_ = false;
  std::string error_;
  std::thread worker_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::ckpt_plugin<Async>())
