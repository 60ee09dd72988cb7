// The documents of `loom data prepare`'s inputs, in order: each JSONL line is one (its `field`
// holds the text), each text file is one. Reading hands out raw records; turning a record into
// text (parsing the JSON, checking the UTF-8) is separate so that it runs on every encoding
// thread rather than on the one reading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "data/input_stream.hpp"

namespace loom::data {

enum class InputFormat { Text, Jsonl };

struct RawDocument {
  uint32_t input = 0;  // index into the reader's inputs
  uint64_t line = 1;   // the JSONL line (a text file: 1)
  std::string bytes;
};

// A record that is not a document: not JSON, no such field, not UTF-8. The message names the
// file and line; --skip-bad counts these instead of stopping.
struct BadDocument : RuntimeError {
  using RuntimeError::RuntimeError;
};

class DocumentReader {
 public:
  // `max_document_bytes` bounds one record (a JSONL line, a text file).
  DocumentReader(std::vector<std::string> inputs, InputFormat format, uint64_t max_document_bytes);
  ~DocumentReader();
  // The next document; false after the last input's last one. Blank JSONL lines are passed over.
  bool next(RawDocument& doc);

  const std::vector<std::string>& inputs() const { return inputs_; }
  InputFormat format() const { return format_; }
  uint64_t bytes_read()
      const;  // bytes of the inputs read so far (compressed bytes where compressed)
  uint64_t total_bytes() const;  // their sizes; 0 when one is unknown (standard input)

 private:
  std::vector<std::string> inputs_;
  InputFormat format_;
  uint64_t max_bytes_, done_bytes_ = 0, total_ = 0;
  size_t at_ = 0;  // the input open in `stream_`, or the next to open
  uint64_t line_ = 0;
  std::unique_ptr<InputStream> stream_;
};

// The text of a document: the JSONL record's `field`, which must be a string, or the text file's
// bytes; either must be valid UTF-8. Throws BadDocument naming `input` and the line.
std::string document_text(const RawDocument& doc, InputFormat format, const std::string& field,
                          const std::string& input);

// The offset of the first byte that does not belong to well-formed UTF-8 (overlong forms,
// surrogates and code points past U+10FFFF included), or npos.
size_t invalid_utf8_at(std::string_view s);

}  // namespace loom::data
