// TensorBoard event files beside metrics.jsonl ([run] tensorboard = true): the same scalars at the
// same steps, for dashboards that read TensorBoard's format (TensorBoard itself, and the
// experiment trackers that import it). Events are protobuf messages (tensorboard_event.proto) in
// TFRecord framing: length, masked CRC32C of the length, the message, masked CRC32C of it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loom::report {

class TensorBoardWriter {
 public:
  // A new events file in `dir` (created), named as TensorBoard expects:
  // events.out.tfevents.<seconds>.<host>.<pid>.loom. A resumed run adds a new file; TensorBoard
  // reads every file of the directory in order.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  // The fields of one metrics line: "step" is the step, every other field a scalar tagged by its
  // name.
  void write(const std::vector<std::pair<std::string, double>>& fields);
  const std::filesystem::path& path() const { return path_; }

 private:
  void append_record(const std::string& bytes);
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace loom::report
