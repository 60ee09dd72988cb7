// One input of `loom data prepare`, read as a stream of bytes and lines: a plain file, gzip or
// zstd (told apart by their magic bytes, not the name), or standard input ("-"). Memory is one
// read buffer and one decompressed buffer, whatever the file's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom::data {

class InputStream {
 public:
  explicit InputStream(std::string path);  // "-" = standard input
  ~InputStream();
  InputStream(const InputStream&) = delete;
  InputStream& operator=(const InputStream&) = delete;

  // The next line, without its '\n' (a last line without one counts too); false at the end, or
  // when more than `max_bytes` come without a newline (line_too_long() then tells). A compressed
  // stream that ends before its last frame does, or holds corrupt data, throws naming the file
  // and the byte offset in it.
  bool next_line(std::string& line, size_t max_bytes = SIZE_MAX);
  bool line_too_long(size_t max_bytes) const;
  // What is left, at most `max_bytes` (throws naming the file and the limit past it).
  std::string rest(uint64_t max_bytes);

  const std::string& name() const { return name_; }
  const char* format() const;                      // "plain", "gzip", "zstd"
  uint64_t consumed() const { return raw_read_; }  // bytes of the file read so far
  uint64_t size() const { return size_; }          // 0 when unknown (a pipe)

 private:
  struct Decoder;
  void open();  // the file, and its format from the first bytes
  bool fill();  // more decompressed bytes into buf_; false at the end of the input
  size_t read_raw(char* out, size_t cap);

  std::string name_;
  int fd_ = -1;
  bool own_fd_ = false;
  uint64_t size_ = 0, raw_read_ = 0;
  std::unique_ptr<Decoder> dec_;
  std::string buf_;  // decompressed bytes not yet handed out, from pos_
  size_t pos_ = 0;
  bool eof_ = false;
};

}  // namespace loom::data
