// Opening input files with messages that say what is wrong: missing, a directory, not readable;
// and writing whole output files so that a full disk is an error with its reason, not a cut file.
// (Reading a directory through an ifstream otherwise surfaces as libstdc++'s
// "basic_filebuf::underflow", naming no file.)
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "core/errors.hpp"

namespace loom {

// Opens `path` for reading; `what` names it in errors ("tokenizer", "text file").
inline std::ifstream open_input(const std::filesystem::path& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RuntimeError("cannot read " + what + " '" + path.string() + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError("cannot open " + what + " '" + path.string() + "'" + os_reason());
  return in;
}

// The whole file.
inline std::string read_file(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in = open_input(path, what);
  std::string bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0)
    bytes.append(buf, static_cast<size_t>(in.gcount()));
  if (in.bad())
    throw RuntimeError("cannot read " + what + " '" + path.string() + "'" + os_reason());
  return bytes;
}

// The whole of a regular file no larger than `max_bytes`, its size read before any allocation: a
// device (/dev/zero), a FIFO or a file too large for what reads it is refused, naming it, rather
// than filling memory.
std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                              uintmax_t max_bytes);

// A file written in pieces through `path`.partial, renamed to `path` by commit(): a reader never
// sees half a file, and a failed write (a full disk) throws naming `what`, the file, the system's
// reason and how many bytes got written. The partial file is removed unless commit() succeeded.
class OutputFile {
 public:
  OutputFile(std::filesystem::path path, std::string what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  void append(const void* data, size_t bytes);
  // durable: fsync before the rename, so a crash leaves the old file or the whole new one.
  void commit(bool durable = false);

 private:
  [[noreturn]] void fail(const std::string& why);
  std::filesystem::path path_, partial_;
  std::string what_;
  int fd_ = -1;
  size_t written_ = 0;
};

// Writes all `bytes` to `fd`, retrying short writes and EINTR. Returns how many were written:
// fewer only on failure, with errno saying why (0 when the system accepted no more bytes).
size_t write_fully(int fd, const void* data, size_t bytes);

// Writes `bytes` as `path`, through `path`.partial and a rename: a reader never sees half a file,
// and a failed write (a full disk) removes the partial file and throws naming `what`, the file,
// the system's reason and how many bytes got written.
void write_file(const std::filesystem::path& path, std::string_view bytes, const std::string& what);

// Whether write_file(path) could create its file, found before long work rather than after it
// (a compare's rounds, a calibration's measurements). Throws as write_file does.
void check_can_write(const std::filesystem::path& path, const std::string& what);

}  // namespace loom
