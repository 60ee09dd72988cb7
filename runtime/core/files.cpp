#include "core/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace loom {

std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                              uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  const std::string where = what + " '" + path.string() + "'";
  if (ec || !fs::exists(st))
    throw RuntimeError("cannot open " + where + (ec ? ": " + ec.message() : ": no such file"));
  if (!fs::is_regular_file(st)) {
    const char* kind = fs::is_directory(st)        ? "a directory"
                       : fs::is_character_file(st) ? "a character device"
                       : fs::is_block_file(st)     ? "a block device"
                       : fs::is_fifo(st)           ? "a FIFO"
                       : fs::is_socket(st)         ? "a socket"
                                                   : "not a file";
    throw RuntimeError("cannot read " + where + ": it is " + std::string(kind) +
                       ", not a regular file");
  }
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw RuntimeError("cannot read " + where + ": " + ec.message());
  if (size > max_bytes)
    throw RuntimeError("cannot read " + where + ": it has " + std::to_string(size) +
                       " bytes, more than the " + std::to_string(max_bytes) +
                       " this command reads");
  return read_file(path, what);
}

OutputFile::OutputFile(std::filesystem::path path, std::string what)
    : path_(std::move(path)), partial_(path_.string() + ".partial"), what_(std::move(what)) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec)) fail("it is a directory");
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
               0666);  // less the umask, as ofstream does
  if (fd_ < 0) fail(std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(partial_.c_str());  // not committed: nothing half-written is left behind
}

void OutputFile::fail(const std::string& why) {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(partial_.c_str());
    fd_ = -1;
  }
  throw RuntimeError("cannot write " + what_ + " '" + path_.string() + "': " + why);
}

// A write that comes up short is retried; the retry says why (ENOSPC, EDQUOT, EIO), so the
// reason is never "Success".
void OutputFile::append(const void* data, size_t bytes) {
  const size_t done = write_fully(fd_, data, bytes);
  if (done < bytes)
    fail(std::string(errno ? std::strerror(errno) : "the system accepted no more bytes") + " (" +
         std::to_string(written_ + done) + " bytes written)");
  written_ += bytes;
}

size_t write_fully(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return done;
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

void OutputFile::commit(bool durable) {
  if (durable && ::fsync(fd_) != 0) fail(std::string("fsync: ") + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {  // NFS may report a full disk only here
    const std::string why = std::strerror(errno);
    ::unlink(partial_.c_str());
    throw RuntimeError("cannot write " + what_ + " '" + path_.string() + "': " + why);
  }
  if (::rename(partial_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(partial_.c_str());
    throw RuntimeError("cannot write " + what_ + " '" + path_.string() + "': " + why);
  }
}

void write_file(const std::filesystem::path& path, std::string_view bytes,
                const std::string& what) {
  OutputFile out(path, what);
  out.append(bytes.data(), bytes.size());
  out.commit();
}

void check_can_write(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RuntimeError("cannot write " + what + " '" + path.string() + "': it is a directory");
  const std::filesystem::path probe = path.string() + ".partial";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        0666);  // less the umask, as ofstream does
  if (fd < 0)
    throw RuntimeError("cannot write " + what + " '" + path.string() +
                       "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace loom
