#include "data/documents.hpp"

#include <simdjson.h>
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

namespace loom::data {

DocumentReader::DocumentReader(std::vector<std::string> inputs, InputFormat format,
                               uint64_t max_document_bytes)
    : inputs_(std::move(inputs)), format_(format), max_bytes_(max_document_bytes) {
  if (inputs_.empty()) throw UsageError("data prepare needs at least one input");
  if (std::count(inputs_.begin(), inputs_.end(), "-") > 1)
    throw UsageError("standard input ('-') can be read once");
  bool sized = true;
  for (const std::string& in : inputs_) {
    struct stat st {};
    if (in != "-" && ::stat(in.c_str(), &st) != 0)
      throw RuntimeError("cannot open input '" + in + "'" + os_reason());
    sized = sized && in != "-" && S_ISREG(st.st_mode);
    total_ += sized ? static_cast<uint64_t>(st.st_size) : 0;
  }
  if (!sized) total_ = 0;
}

DocumentReader::~DocumentReader() = default;

uint64_t DocumentReader::bytes_read() const {
  return done_bytes_ + (stream_ ? stream_->consumed() : 0);
}
uint64_t DocumentReader::total_bytes() const { return total_; }

bool DocumentReader::next(RawDocument& doc) {
  for (;;) {
    if (!stream_) {
      if (at_ == inputs_.size()) return false;
      stream_ = std::make_unique<InputStream>(inputs_[at_]);
      line_ = 0;
    }
    doc.input = static_cast<uint32_t>(at_);
    if (format_ == InputFormat::Text) {
      doc.line = 1;
      doc.bytes = stream_->rest(max_bytes_);
      done_bytes_ += stream_->consumed();
      stream_.reset();
      ++at_;
      return true;
    }
    while (stream_->next_line(doc.bytes, max_bytes_)) {
      ++line_;
      if (doc.bytes.find_first_not_of(" \t\r") == std::string::npos) continue;
      doc.line = line_;
      return true;
    }
    if (stream_->line_too_long(max_bytes_))
      throw RuntimeError(stream_->name() + ":" + std::to_string(line_ + 1) +
                         ": a line longer than the " + std::to_string(max_bytes_ >> 20) +
                         " MiB one document may take under --memory-mb (is it JSONL?)");
    done_bytes_ += stream_->consumed();
    stream_.reset();
    ++at_;
  }
}

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte fixes the length and the range the second byte may take (RFC 3629's table).
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c == 0xe0)
      len = 3, lo = 0xa0;
    else if (c == 0xed)
      len = 3, hi = 0x9f;
    else if (c >= 0xe1 && c <= 0xef)
      len = 3;
    else if (c == 0xf0)
      len = 4, lo = 0x90;
    else if (c == 0xf4)
      len = 4, hi = 0x8f;
    else if (c >= 0xf1 && c <= 0xf3)
      len = 4;
    else
      return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xbf) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

[[noreturn]] void bad(const std::string& input, uint64_t line, const std::string& why) {
  throw BadDocument(input + ":" + std::to_string(line) + ": " + why);
}

void check_utf8(const std::string& text, const std::string& input, uint64_t line,
                bool count_lines) {
  const size_t at = invalid_utf8_at(text);
  if (at == std::string::npos) return;
  if (count_lines) line += static_cast<uint64_t>(std::count(text.begin(), text.begin() + at, '\n'));
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[at]));
  bad(input, line,
      std::string("invalid UTF-8 (byte ") + hex + " at offset " + std::to_string(at) + ")");
}

constexpr size_t kKeptParserBytes = size_t{1} << 20;

// simdjson validates the whole record, its JSON and its UTF-8, at GB/s: nlohmann took a third of
// an encoding thread's time (bench/prepare.sh). A record it refuses goes the slow way, for the
// message.
std::optional<std::string> fast_text(const std::string& record, const std::string& field) {
  // A parser keeps buffers sized to the largest record it has seen: a thread's own for the usual
  // records, and one freed at return for the rare large one, so none stays large.
  thread_local simdjson::dom::parser kept;
  std::optional<simdjson::dom::parser> once;
  simdjson::dom::parser& parser = record.size() <= kKeptParserBytes ? kept : once.emplace();
  simdjson::dom::element root;
  simdjson::dom::object object;
  std::string_view text;
  if (parser.parse(record).get(root) != simdjson::SUCCESS ||
      root.get_object().get(object) != simdjson::SUCCESS ||
      object[field].get_string().get(text) != simdjson::SUCCESS)
    return std::nullopt;
  return std::string(text);
}

}  // namespace

std::string document_text(const RawDocument& doc, InputFormat format, const std::string& field,
                          const std::string& input) {
  if (format == InputFormat::Text) {
    check_utf8(doc.bytes, input, 1, true);
    return doc.bytes;
  }
  if (std::optional<std::string> text = fast_text(doc.bytes, field)) return std::move(*text);
  // Refused: parsed again by nlohmann, whose message says where and why.
  check_utf8(doc.bytes, input, doc.line, false);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(doc.bytes);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number like 1e400.
    // "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error ..." -> from
    // "column"
    std::string why = e.what();
    if (const size_t c = why.find("column"); c != std::string::npos)
      why = why.substr(c);
    else if (const size_t c2 = why.find("] "); c2 != std::string::npos)
      why = why.substr(c2 + 2);
    bad(input, doc.line, "not a JSON value (" + why + ")");
  }
  if (!j.is_object())
    bad(input, doc.line,
        std::string("a JSON ") + j.type_name() + ", not an object with a \"" + field + "\" field");
  const auto it = j.find(field);
  if (it == j.end()) {
    std::string keys;
    for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
    bad(input, doc.line,
        "no \"" + field + "\" field (the record has: " + (keys.empty() ? "nothing" : keys) +
            "); choose one with --field");
  }
  if (!it->is_string())
    bad(input, doc.line, "\"" + field + "\" is a " + it->type_name() + ", not a string");
  return std::move(it->get_ref<std::string&>());
}

}  // namespace loom::data
