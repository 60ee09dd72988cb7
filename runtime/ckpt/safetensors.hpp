// safetensors: an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets [begin, end)}} (plus "__metadata__"), then the raw little-endian data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace loom::ckpt {

struct StEntry {
  std::string dtype;  // F32, F16, BF16
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // bytes into the data section
  std::filesystem::path file;
  uint64_t data_start = 0;  // where the data section starts in the file
};

// The tensors of one .safetensors file, or of every file a model.safetensors.index.json names.
// Throws naming the file and what is wrong (header length past the end, bad JSON, offsets
// outside the data, an unsupported dtype).
std::map<std::string, StEntry> read_safetensors_index(const std::filesystem::path& path);
// A tensor as fp32 (F16 and BF16 widened).
std::vector<float> read_tensor(const std::string& name, const StEntry& e);

// Writes fp32 tensors (in the map's order) with optional metadata.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                       const std::vector<const std::vector<float>*>& data,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace loom::ckpt
