#include "data/input_stream.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"

namespace loom::data {

namespace {
constexpr size_t kChunk = size_t{1} << 20;
}

// A gzip or zstd decoder over the raw bytes in `in` (in_pos..in_len). `at_end` is true between
// frames (gzip members): the only places a compressed file may end.
struct InputStream::Decoder {
  enum Kind { Plain, Gzip, Zstd } kind = Plain;
  std::string in = std::string(kChunk, '\0');
  size_t in_pos = 0, in_len = 0;
  z_stream z{};
  ZSTD_DStream* zs = nullptr;
  bool at_end = true;

  ~Decoder() {
    if (kind == Gzip) inflateEnd(&z);
    if (zs) ZSTD_freeDStream(zs);
  }
};

InputStream::InputStream(std::string path)
    : name_(std::move(path)), dec_(std::make_unique<Decoder>()) {
  try {
    open();
  } catch (...) {
    if (own_fd_) ::close(fd_);  // the destructor does not run for a constructor that throws
    throw;
  }
}

void InputStream::open() {
  if (name_ == "-") {
    fd_ = 0;
    name_ = "standard input";
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(name_, ec))
      throw RuntimeError("cannot read input '" + name_ + "': it is a directory");
    fd_ = ::open(name_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw RuntimeError("cannot open input '" + name_ + "'" + os_reason());
    own_fd_ = true;
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = static_cast<uint64_t>(st.st_size);
  }
  Decoder& d = *dec_;
  while (d.in_len < 4) {  // the magic bytes, kept for the decoder
    const size_t n = read_raw(d.in.data() + d.in_len, 4 - d.in_len);
    if (n == 0) break;
    d.in_len += n;
  }
  const unsigned char* m = reinterpret_cast<const unsigned char*>(d.in.data());
  const bool xz = d.in_len >= 4 && m[0] == 0xfd && m[1] == '7' && m[2] == 'z' && m[3] == 'X';
  const bool bzip2 =
      d.in_len >= 4 && m[0] == 'B' && m[1] == 'Z' && m[2] == 'h' && m[3] >= '1' && m[3] <= '9';
  if (xz || bzip2)
    throw RuntimeError("input '" + name_ + "' is " + (xz ? "xz" : "bzip2") +
                       "-compressed; Loom reads gzip and zstd: "
                       "pipe it in instead (" +
                       (xz ? "xz" : "bzip2") + " -dc FILE | loom data prepare --jsonl - ...)");
  // A zstd frame, or a skippable frame before one (pzstd writes one first).
  const bool zstd =
      d.in_len >= 4 && ((m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) ||
                        ((m[0] & 0xf0) == 0x50 && m[1] == 0x2a && m[2] == 0x4d && m[3] == 0x18));
  if (d.in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b) {
    d.kind = Decoder::Gzip;
    if (inflateInit2(&d.z, 15 + 16) != Z_OK)
      throw RuntimeError("zlib: cannot start a gzip decoder");
  } else if (zstd) {
    d.kind = Decoder::Zstd;
    d.zs = ZSTD_createDStream();
    if (!d.zs || ZSTD_isError(ZSTD_initDStream(d.zs)))
      throw RuntimeError("zstd: cannot start a decoder");
  } else {
    buf_.assign(d.in.data(), d.in_len);
    d.in_len = 0;
  }
}

InputStream::~InputStream() {
  if (own_fd_) ::close(fd_);
}

const char* InputStream::format() const {
  return dec_->kind == Decoder::Gzip ? "gzip" : dec_->kind == Decoder::Zstd ? "zstd" : "plain";
}

size_t InputStream::read_raw(char* out, size_t cap) {
  for (;;) {
    const ssize_t n = ::read(fd_, out, cap);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw RuntimeError("cannot read input '" + name_ + "' at byte " + std::to_string(raw_read_) +
                         os_reason());
    raw_read_ += static_cast<uint64_t>(n);
    return static_cast<size_t>(n);
  }
}

bool InputStream::fill() {
  if (eof_) return false;
  buf_.erase(0, pos_);
  pos_ = 0;
  Decoder& d = *dec_;
  const size_t before = buf_.size();
  while (buf_.size() == before) {
    if (d.kind == Decoder::Plain) {
      buf_.resize(before + kChunk);
      const size_t n = read_raw(buf_.data() + before, kChunk);
      buf_.resize(before + n);
      if (n == 0) return !(eof_ = true);
      continue;
    }
    if (d.in_pos == d.in_len) {
      d.in_pos = 0;
      d.in_len = read_raw(d.in.data(), kChunk);
      if (d.in_len == 0) {
        if (!d.at_end)
          throw RuntimeError("input '" + name_ + "': the " + format() +
                             " stream is truncated: the file ends at byte " +
                             std::to_string(raw_read_) + " inside a compressed frame");
        return !(eof_ = true);
      }
    }
    // The file offset the decoder had reached when it failed.
    const auto at = [&](size_t pos) { return std::to_string(raw_read_ - (d.in_len - pos)); };
    buf_.resize(before + kChunk);
    size_t produced = 0;
    if (d.kind == Decoder::Gzip) {
      if (d.at_end && d.z.total_in > 0)
        inflateReset(&d.z);  // the next member of a concatenated file
      d.z.next_in = reinterpret_cast<Bytef*>(d.in.data() + d.in_pos);
      d.z.avail_in = static_cast<uInt>(d.in_len - d.in_pos);
      d.z.next_out = reinterpret_cast<Bytef*>(buf_.data() + before);
      d.z.avail_out = static_cast<uInt>(kChunk);
      const int rc = inflate(&d.z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        throw RuntimeError("input '" + name_ + "': corrupt gzip data, found at byte " +
                           at(d.in_len - d.z.avail_in) + ": " +
                           (d.z.msg ? d.z.msg : "zlib error " + std::to_string(rc)));
      d.at_end = rc == Z_STREAM_END;
      d.in_pos = d.in_len - d.z.avail_in;
      produced = kChunk - d.z.avail_out;
    } else {
      ZSTD_inBuffer in{d.in.data(), d.in_len, d.in_pos};
      ZSTD_outBuffer out{buf_.data() + before, kChunk, 0};
      const size_t rc = ZSTD_decompressStream(d.zs, &out, &in);
      if (ZSTD_isError(rc))
        throw RuntimeError("input '" + name_ + "': corrupt zstd data, found at byte " + at(in.pos) +
                           ": " + ZSTD_getErrorName(rc));
      d.at_end = rc == 0;
      d.in_pos = in.pos;
      produced = out.pos;
    }
    buf_.resize(before + produced);
  }
  return true;
}

bool InputStream::next_line(std::string& line, size_t max_bytes) {
  for (size_t scanned = pos_;;) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl != std::string::npos && nl - pos_ > max_bytes) return false;  // line_too_long() says so
    if (nl != std::string::npos) {
      line.assign(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      return true;
    }
    const size_t have = buf_.size() - pos_;
    if (have > max_bytes) return false;  // the caller names the line: it is too long to hold
    if (!fill()) {
      if (pos_ == buf_.size()) return false;
      line.assign(buf_, pos_, std::string::npos);
      pos_ = buf_.size();
      return true;
    }
    scanned = have;  // fill() moved the unread bytes to the front
  }
}

bool InputStream::line_too_long(size_t max_bytes) const { return buf_.size() - pos_ > max_bytes; }

std::string InputStream::rest(uint64_t max_bytes) {
  std::string out;
  do {
    out.append(buf_, pos_, std::string::npos);
    pos_ = buf_.size();
    if (out.size() > max_bytes)
      throw RuntimeError(
          "input '" + name_ + "' holds more than " + std::to_string(max_bytes >> 20) +
          " MiB, and a text file is one document read whole: raise --memory-mb, split the file, or "
          "give it as JSONL (one document per line)");
  } while (fill());
  return out;
}

}  // namespace loom::data
