#include "data/shards.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;

namespace loom::data {

std::array<int32_t, kHeaderInts> shard_header(int width, int64_t count) {
  std::array<int32_t, kHeaderInts> h{};
  h[0] = width == 4 ? kShardMagic32 : kShardMagic;
  h[1] = width == 4 ? kShardVersion32 : kShardVersion;
  h[2] = static_cast<int32_t>(count);
  return h;
}

void write_shard(const fs::path& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  const bool wide = vocab_size > 65536;
  const std::array<int32_t, kHeaderInts> header =
      shard_header(wide ? 4 : 2, static_cast<int64_t>(tokens.size()));
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    if (wide) {
      out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
    } else {
      std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
      out.write(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
    }
    if (!out)
      throw RuntimeError("cannot write token shard '" + tmp.string() +
                         "': " + std::strerror(errno));
  }
  fs::rename(tmp, path);  // readers never see a half-written shard
}

TokenShard::TokenShard(const fs::path& path, int64_t vocab_size) : path_(path), vocab_(vocab_size) {
  const std::string where = "token shard '" + path.string() + "': ";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError("cannot open " + where + std::strerror(errno));
  int32_t header[kHeaderInts];
  const ssize_t got = ::pread(fd, header, sizeof header, 0);
  const uintmax_t actual = fs::file_size(path);
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw RuntimeError(where + why);
  };
  if (got != static_cast<ssize_t>(sizeof header)) fail("shorter than the 1024-byte header");
  if (header[0] == kShardMagic && header[1] == kShardVersion) {
    width_ = 2;
  } else if (header[0] == kShardMagic32 && header[1] == kShardVersion32) {
    width_ = 4;
  } else if (header[0] != kShardMagic && header[0] != kShardMagic32) {
    fail("bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kShardMagic) +
         " or " + std::to_string(kShardMagic32) + "); not an llm.c token shard");
  } else {
    fail("version " + std::to_string(header[1]) + " with magic " + std::to_string(header[0]) +
         ", expected " +
         std::to_string(header[0] == kShardMagic ? kShardVersion : kShardVersion32));
  }
  count_ = header[2];
  const uintmax_t expected = 1024 + static_cast<uintmax_t>(width_) * static_cast<uintmax_t>(count_);
  if (count_ < 0 || actual != expected)
    fail("header says " + std::to_string(count_) + " tokens (" + std::to_string(expected) +
         " bytes) but the file has " + std::to_string(actual) + " bytes");
  bytes_ = static_cast<size_t>(actual);
  struct stat st {};
  ::fstat(fd, &st);
  inode_ = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  ::close(fd);
}

void TokenShard::read(int64_t first, int64_t n, int32_t* out) const {
  // pread, not a mapping: a shard cut short while the run reads it is an error here, where a
  // mapped page past the new end of the file would kill the process with SIGBUS. Opened per
  // window, so thousands of shards hold no descriptors (one open costs microseconds).
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError("cannot open token shard '" + path_.string() + "': " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) == 0 && (static_cast<uint64_t>(st.st_dev) != inode_.first ||
                                static_cast<uint64_t>(st.st_ino) != inode_.second))
    throw RuntimeError(
        "token shard '" + path_.string() +
        "' was replaced by another file while the run read it (a new `data "
        "prepare` into the same directory?): restart the run to read the new data from its start");
  const size_t want = static_cast<size_t>(width_ * n);
  std::vector<char> raw(want);
  const off_t at = static_cast<off_t>(1024 + width_ * first);
  for (size_t done = 0; done < want;) {
    const ssize_t got = ::pread(fd, raw.data() + done, want - done, at + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      std::error_code ec;
      const uintmax_t now = fs::file_size(path_, ec);
      throw RuntimeError(
          "token shard '" + path_.string() + "': cannot read tokens " + std::to_string(first) +
          ".." + std::to_string(first + n) + ": " +
          (got < 0 ? std::string(std::strerror(errno))
                   : "the file now has " +
                         (ec ? std::string("no size") : std::to_string(now) + " bytes") + ", " +
                         std::to_string(bytes_) +
                         " when the run opened it (was it truncated or rewritten in place?)"));
    }
    done += static_cast<size_t>(got);
  }
  for (int64_t i = 0; i < n; ++i) {
    uint32_t t = 0;
    if (width_ == 2) {
      uint16_t v;
      std::memcpy(&v, raw.data() + 2 * i, 2);
      t = v;
    } else {
      std::memcpy(&t, raw.data() + 4 * i, 4);
    }
    if (static_cast<int64_t>(t) >= vocab_)
      throw RuntimeError("token shard '" + path_.string() + "': token " + std::to_string(t) +
                         " at position " + std::to_string(first + i) +
                         " is outside the vocabulary (" + std::to_string(vocab_) + ")");
    out[i] = static_cast<int32_t>(t);
  }
}

namespace {

// "fineweb_train_000001.bin" has the parts fineweb, train, 000001.
bool names_split(const std::string& file, const std::string& split) {
  if (!file.ends_with(".bin")) return false;
  const std::string stem = file.substr(0, file.size() - 4);
  size_t begin = 0;
  while (begin <= stem.size()) {
    size_t end = stem.find_first_of("_-.", begin);
    if (end == std::string::npos) end = stem.size();
    if (stem.compare(begin, end - begin, split) == 0 && end - begin == split.size()) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

TokenSplit::TokenSplit(const fs::path& dir, const std::string& split, int64_t vocab_size) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (names_split(e.path().filename().string(), split)) files.push_back(e.path());
  if (ec) throw RuntimeError("cannot read data directory '" + dir.string() + "': " + ec.message());
  if (files.empty())
    throw RuntimeError("no " + split + " shards (*" + split + "*.bin) in '" + dir.string() +
                       "'; make them with: loom data prepare --text FILE... --out " + dir.string());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    // A FIFO or a device under a shard's name would block the run on its first read.
    if (!fs::is_regular_file(f, ec))
      throw RuntimeError("shard '" + f.string() +
                         "' is not a regular file (a FIFO, a device or a directory)");
    shards_.push_back(std::make_unique<TokenShard>(f, vocab_size));
    begin_.push_back(total_);
    total_ += shards_.back()->size();
  }
}

void TokenSplit::read(int64_t first, int64_t n, int32_t* out) const {
  if (first < 0 || first + n > total_)
    throw RuntimeError("tokens [" + std::to_string(first) + ", " + std::to_string(first + n) +
                       ") are past the split's " + std::to_string(total_));
  size_t s = std::upper_bound(begin_.begin(), begin_.end(), first) - begin_.begin() - 1;
  while (n > 0) {
    const int64_t at = first - begin_[s], take = std::min(n, shards_[s]->size() - at);
    shards_[s]->read(at, take, out);
    out += take, first += take, n -= take, ++s;
  }
}

std::vector<int32_t> TokenSplit::all() const {
  std::vector<int32_t> t(total_);
  read(0, total_, t.data());
  return t;
}

}  // namespace loom::data
