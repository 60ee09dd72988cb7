#include "data/shard_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "data/shards.hpp"

namespace fs = std::filesystem;

namespace loom::data {

namespace {

constexpr size_t kBufferBytes = size_t{4} << 20;

void write_all(int fd, const char* p, size_t n, const fs::path& file) {
  if (write_fully(fd, p, n) < n)
    throw RuntimeError("cannot write token shard '" + file.string() + "'" + os_reason());
}

// Tokens in every split's shards (those on disk when this process resumed, and those it appended
// since), for kill_at_token.
int64_t g_appended = 0;

}  // namespace

int64_t ShardWriter::kill_at_token() {
  static const int64_t at = [] {
    const char* v = std::getenv("LOOM_PREPARE_KILL_AT_TOKEN");
    return v ? std::atoll(v) : 0;
  }();
  return at;
}

ShardWriter::ShardWriter(fs::path dir, std::string split, int64_t vocab_size, int64_t shard_tokens,
                         int64_t complete, int64_t partial)
    : dir_(std::move(dir)),
      split_(std::move(split)),
      width_(vocab_size > 65536 ? 4 : 2),
      vocab_(vocab_size),
      shard_tokens_(shard_tokens),
      complete_(complete),
      partial_(partial),
      total_(complete * shard_tokens + partial) {
  if (shard_tokens_ < 1 || shard_tokens_ > INT32_MAX)
    throw UsageError("--shard-tokens must be in [1, 2^31), got " + std::to_string(shard_tokens_));
  buf_.reserve(kBufferBytes);
  restore();
  g_appended += tokens();
}

ShardWriter::~ShardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

fs::path ShardWriter::name(int64_t k) const {
  char file[64];
  std::snprintf(file, sizeof file, "%s_%06lld.bin", split_.c_str(), static_cast<long long>(k));
  return dir_ / file;
}

fs::path ShardWriter::tmp(int64_t k) const {
  fs::path p = name(k);
  p += ".tmp";
  return p;
}

// Every shard past the resume point goes, and the partial one is cut back to what the point
// counted: a shard named after the point was recorded becomes the partial one again.
void ShardWriter::restore() {
  std::error_code ec;
  for (int64_t k = complete_ + 1; fs::exists(name(k), ec) || fs::exists(tmp(k), ec); ++k) {
    fs::remove(name(k), ec);
    fs::remove(tmp(k), ec);
  }
  if (complete_ == 0 && partial_ == 0) {
    fs::remove(name(0), ec);
    fs::remove(tmp(0), ec);
  }
  for (int64_t k = 0; k < complete_; ++k)
    if (!fs::exists(name(k), ec))
      throw RuntimeError("cannot resume: shard '" + name(k).string() +
                         "', complete at the last resume point, is gone; "
                         "prepare again without --resume");
  if (fs::exists(name(complete_), ec)) fs::rename(name(complete_), tmp(complete_));
  const uintmax_t want = 1024 + static_cast<uintmax_t>(width_) * static_cast<uintmax_t>(partial_);
  if (partial_ > 0) {
    const uintmax_t have = fs::file_size(tmp(complete_), ec);
    if (ec || have < want)
      throw RuntimeError("cannot resume: '" + tmp(complete_).string() + "' should hold " +
                         std::to_string(partial_) + " tokens and " +
                         (ec ? "is gone" : "holds fewer") + "; prepare again without --resume");
  }
  fd_ = ::open(tmp(complete_).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw RuntimeError("cannot create token shard '" + tmp(complete_).string() + "'" + os_reason());
  const std::vector<char> zeros(
      1024, 0);  // a shard named back to .tmp loses its header until it is whole again
  if (::ftruncate(fd_, static_cast<off_t>(want)) != 0 ||
      ::pwrite(fd_, zeros.data(), zeros.size(), 0) != 1024 ||
      ::lseek(fd_, static_cast<off_t>(want), SEEK_SET) < 0)
    throw RuntimeError("cannot cut '" + tmp(complete_).string() + "' back to the resume point" +
                       os_reason());
}

void ShardWriter::open_next() {
  fd_ = ::open(tmp(complete_).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw RuntimeError("cannot create token shard '" + tmp(complete_).string() + "'" + os_reason());
  const std::vector<char> zeros(1024, 0);  // magic 0: never read as a shard, whatever its name
  write_all(fd_, zeros.data(), zeros.size(), tmp(complete_));
}

void ShardWriter::flush() {
  write_all(fd_, buf_.data(), buf_.size(), tmp(complete_));
  buf_.clear();
}

void ShardWriter::append(const uint32_t* ids, size_t n) {
  const int64_t kill = kill_at_token();
  while (n > 0) {
    if (fd_ < 0) open_next();
    size_t take = std::min<size_t>(n, static_cast<size_t>(shard_tokens_ - partial_));
    const bool die =
        kill > 0 && g_appended < kill && g_appended + static_cast<int64_t>(take) >= kill;
    if (die) take = static_cast<size_t>(kill - g_appended);
    for (size_t i = 0; i < take; ++i) {
      if (buf_.size() + 4 > kBufferBytes) flush();
      const uint32_t id = ids[i];
      if (width_ == 2) {
        const uint16_t v = static_cast<uint16_t>(id);
        buf_.insert(buf_.end(), reinterpret_cast<const char*>(&v),
                    reinterpret_cast<const char*>(&v) + 2);
      } else {
        buf_.insert(buf_.end(), reinterpret_cast<const char*>(&id),
                    reinterpret_cast<const char*>(&id) + 4);
      }
    }
    partial_ += static_cast<int64_t>(take);
    total_ += static_cast<int64_t>(take);
    g_appended += static_cast<int64_t>(take);
    ids += take, n -= take;
    if (die) {
      flush();  // as far as a write got when the process died
      std::raise(SIGKILL);
    }
    if (partial_ == shard_tokens_) complete_shard();
  }
}

void ShardWriter::complete_shard() {
  flush();
  const std::array<int32_t, kHeaderInts> header = shard_header(width_, partial_);
  if (::pwrite(fd_, header.data(), sizeof header, 0) != static_cast<ssize_t>(sizeof header) ||
      ::fsync(fd_) != 0)
    throw RuntimeError("cannot write token shard '" + tmp(complete_).string() + "'" + os_reason());
  ::close(fd_);
  fd_ = -1;
  fs::rename(tmp(complete_), name(complete_));
  written_.push_back(name(complete_));
  ++complete_;
  partial_ = 0;
}

void ShardWriter::sync() {
  if (fd_ < 0) return;
  flush();
  if (::fdatasync(fd_) != 0)
    throw RuntimeError("cannot sync token shard '" + tmp(complete_).string() + "'" + os_reason());
}

void ShardWriter::finish() {
  if (fd_ >= 0 && partial_ > 0) complete_shard();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    std::error_code ec;
    fs::remove(tmp(complete_), ec);
  }
}

}  // namespace loom::data
