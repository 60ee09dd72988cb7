// The checkpoint read path of the ckpt slot. A writer that stores files in a form of
// its own (compressed, bundled, remote) reads them back through its table; a writer that stores
// them as given leaves `read` NULL and the runtime reads the files. Resume, verify, inspect,
// export and init_from all read through here.
#pragma once

#include <filesystem>
#include <memory>

#include "ckpt/format.hpp"
#include "loader/registry.hpp"

namespace loom::ckpt {

// True when the writer's table has a read path.
bool reads_back(const loom_plugin* desc);

// A Reader over a live writer instance: its read path, or the disk when it has none.
Reader reader_of(const plugins::Instance& writer);

// The reader for a committed checkpoint: the ckpt plugin its manifest records (from the recorded
// library, else by name on the search path), created with the options of the config the
// checkpoint recorded, when that plugin reads back; the disk otherwise.
class CheckpointReader {
 public:
  CheckpointReader(const std::filesystem::path& dir, const Manifest& m);
  ~CheckpointReader();
  const Reader& reader() const { return reader_; }

 private:
  std::unique_ptr<plugins::Instance> writer_;
  Reader reader_;
};

}  // namespace loom::ckpt
