#include "report/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ckpt/crc32c.hpp"
#include "core/errors.hpp"
#include "tensorboard_event.pb.h"

namespace fs = std::filesystem;

namespace loom::report {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant, so a CRC of data that
// itself holds CRCs does not come out trivially.
uint32_t masked_crc(const void* data, size_t n) {
  const uint32_t crc = ckpt::crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) +
                 "." + host + "." + std::to_string(::getpid()) + ".loom");
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_)
    throw RuntimeError("cannot write TensorBoard events file '" + path_.string() +
                       "': " + std::strerror(errno));
  tensorboard::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  append_record(first.SerializeAsString());
}

void TensorBoardWriter::write(const std::vector<std::pair<std::string, double>>& fields) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [name, value] : fields) {
    if (name == "step") {
      event.set_step(static_cast<int64_t>(value));
      continue;
    }
    tensorboard::ScalarValue* v = summary->add_value();
    v->set_tag(name);
    v->set_simple_value(static_cast<float>(value));
  }
  append_record(event.SerializeAsString());
}

// uint64 length, uint32 masked CRC of those 8 bytes, the bytes, uint32 masked CRC of them
// (little-endian).
void TensorBoardWriter::append_record(const std::string& bytes) {
  const uint64_t length = bytes.size();
  const uint32_t length_crc = masked_crc(&length, sizeof length),
                 data_crc = masked_crc(bytes.data(), bytes.size());
  errno = 0;
  out_.write(reinterpret_cast<const char*>(&length), sizeof length);
  out_.write(reinterpret_cast<const char*>(&length_crc), sizeof length_crc);
  out_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out_.write(reinterpret_cast<const char*>(&data_crc), sizeof data_crc);
  out_.flush();
  if (!out_)
    throw RuntimeError("writing '" + path_.string() +
                       "' failed: " + (errno ? std::strerror(errno) : "I/O error"));
}

}  // namespace loom::report
