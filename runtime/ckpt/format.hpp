// The checkpoint format, independent of the layout that wrote it. A committed checkpoint is a
// directory step-NNNNNNNN/ holding
//   manifest.json   step, optimizer step, layout, every tensor's global shape, and for each file
//                   its size, CRC32C and which slice of which tensor sits at which byte offset
//   rank-RRRRR.bin  the raw fp32 slices one rank owned (parameters, AdamW m and v), no gather
//   precision.bin   the precision plugin's scaling state (loss scale, fp8 amax histories)
// It is written as step-NNNNNNNN.tmp/ and renamed once every rank's files are durable; the file
// `latest` names the newest committed one and is replaced last.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace loom::ckpt {

struct Part {
  std::string tensor;                // "h0.attn.qkv.w", "h0.attn.qkv.w.adam_m", ...
  std::vector<int64_t> local_shape;  // of the slice this file holds
  Slice slice;
  int64_t offset = 0;  // bytes into the file
  // A ZeRO shard's piece: elements [flat_begin, flat_begin + flat_count) of the slice, in its
  // row-major order; flat_count -1 = the whole slice.
  int64_t flat_begin = 0, flat_count = -1;
  int64_t count() const;  // elements this part holds
};

struct File {
  std::string name;  // "rank-00003.bin"
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<Part> parts;
};

struct Manifest {
  int64_t step = 0, applied = 0;                       // the last step done, and AdamW's step count
  std::map<std::string, int64_t> layout;               // world, dp, tp, pp, ep
  std::string precision;                               // the plugin that wrote precision.bin
  File precision_state;                                // precision.bin (no parts)
  std::map<std::string, std::vector<int64_t>> shapes;  // every tensor's global shape
  std::vector<File> files;
  std::string config;  // the resolved config that trained it
  // The plugins that wrote it, per slot: name, version, the ABI they were built for, library path.
  std::vector<std::map<std::string, std::string>> plugins;
};

std::string step_name(int64_t step);      // "step-00000010"
bool is_step_name(const std::string& s);  // "step-" and at least 8 digits, as step_name writes them

// What a checkpoint root already holds, for a message ("latest: step-00000004", or "step-00000002
// and 1 more"); "" when it holds no committed checkpoint and no `latest`.
std::string existing_checkpoints(const std::filesystem::path& root);

// How a checkpoint's files are read: from disk, or through the ckpt plugin that wrote them when it
// stores them in a form of its own (the ckpt slot's read path; ckpt/reader.hpp).
struct Reader {
  std::function<std::vector<char>(const std::filesystem::path& dir, const std::string& name)> read;
  // The file's size as it was saved; -1 when it is not there.
  std::function<int64_t(const std::filesystem::path& dir, const std::string& name)> size;
  std::string via = "disk";  // "disk", or "plugin 'name'", for messages
};
const Reader& disk_reader();
// The crc32c of a file as `reader` reads it back (from disk: streamed, in pieces).
uint32_t checksum(const Reader& reader, const std::filesystem::path& dir, const std::string& name);

// "data-state-00003.bin": rank 3's state of the data plugin (its save_state).
std::string data_state_file(int rank);

// Reads DIR/manifest.json. A missing, truncated or hand-edited manifest is a RuntimeError that
// names the file and what is wrong, never a crash.
Manifest read_manifest(const std::filesystem::path& dir, const std::string& file = "manifest.json");
void write_json(const std::filesystem::path& file,
                const Manifest& m);  // durably: temporary, fsync, rename

// Writes a file durably: a temporary beside it, fsynced, renamed over it.
void write_durable(const std::filesystem::path& file, const std::string& text);
void sync_dir(const std::filesystem::path& dir);

// Every tensor's parts hold exactly its elements (no CRCs read): what commit checks before it
// publishes a checkpoint, and verify after the checksums.
void check_coverage(const std::filesystem::path& dir, const Manifest& m);

// Every file present, of its size and checksum, and every tensor fully covered by its parts.
// Throws naming the file (and the tensors it holds) or the tensor at fault.
void verify(const std::filesystem::path& dir, const Manifest& m,
            const Reader& reader = disk_reader());

// The global tensor `name` assembled from every part that holds a piece of it. `files` caches
// the files read, so assembling every tensor reads each file once.
std::vector<float> assemble(const std::filesystem::path& dir, const Manifest& m,
                            const std::string& name,
                            std::map<std::string, std::vector<char>>& files,
                            const Reader& reader = disk_reader());

// What a user may name as a checkpoint: a step directory (itself), a checkpoint root (its latest)
// or a run directory (its checkpoints' latest). Anything else comes back as it is, for the reader
// to refuse; a run directory that saved nothing is refused here, saying so.
std::filesystem::path find_checkpoint(const std::filesystem::path& p);

// "latest" -> the committed checkpoint `latest` names under `root`; otherwise a path.
std::filesystem::path resolve(const std::filesystem::path& root, const std::string& which);

}  // namespace loom::ckpt
