#include "ckpt/safetensors.hpp"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::ckpt {

namespace {

size_t dtype_bytes(const std::string& d) {
  return d == "F32" ? 4 : (d == "F16" || d == "BF16") ? 2 : 0;
}

// IEEE half to float, subnormals included.
float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do ++e, m <<= 1;
      while (!(m & 0x400));
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::map<std::string, StEntry> read_one(const fs::path& path) {
  const std::string where = "safetensors '" + path.string() + "': ";
  std::ifstream in = open_input(path, "safetensors file");
  const uint64_t size = fs::file_size(path);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8))
    throw RuntimeError(where + "shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > size - 8)
    throw RuntimeError(where + "header length " + std::to_string(n) + " is past the end of the " +
                       std::to_string(size) + "-byte file");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    throw RuntimeError(where + "header is not JSON: " + e.what());
  }
  std::map<std::string, StEntry> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    StEntry e;
    try {  // a header entry without its fields, or of other types, is a damaged file (found by
           // fuzzing)
      e.dtype = v.at("dtype").get<std::string>();
      e.shape = json_integers<int64_t>(v.at("shape"), "\"shape\"");
      e.begin = json_integer<uint64_t>(v.at("data_offsets").at(0), "\"data_offsets\"");
      e.end = json_integer<uint64_t>(v.at("data_offsets").at(1), "\"data_offsets\"");
    } catch (const std::exception& x) {  // json's own errors, and json_integer's
      throw RuntimeError(where + "tensor " + name + ": header entry is damaged: " + x.what());
    }
    e.file = path;
    e.data_start = 8 + n;
    if (!dtype_bytes(e.dtype))
      throw RuntimeError(where + "tensor " + name + " has dtype " + e.dtype +
                         " (F32, F16 or BF16 expected)");
    uint64_t count = 1;
    for (int64_t d : e.shape) {
      if (d < 0 || (d > 0 && count > (uint64_t{1} << 48) / static_cast<uint64_t>(d)))
        throw RuntimeError(where + "tensor " + name + " has an impossible shape");
      count *= static_cast<uint64_t>(d);
    }
    if (e.end < e.begin || e.end - e.begin != count * dtype_bytes(e.dtype) ||
        e.data_start + e.end > size)
      throw RuntimeError(where + "tensor " + name + ": data_offsets [" + std::to_string(e.begin) +
                         ", " + std::to_string(e.end) +
                         ") do not hold its shape or lie past the end of the file");
    out[name] = e;
  }
  return out;
}

}  // namespace

std::map<std::string, StEntry> read_safetensors_index(const fs::path& path) {
  if (path.extension() != ".json") return read_one(path);
  std::ifstream in(path);
  if (!in) throw RuntimeError("cannot open '" + path.string() + "'" + os_reason());
  json index;
  try {
    index = json::parse(in);
  } catch (const json::exception& e) {
    throw RuntimeError("'" + path.string() + "' is not JSON: " + e.what());
  }
  std::map<std::string, std::map<std::string, StEntry>> files;
  std::map<std::string, StEntry> out;
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw RuntimeError("'" + path.string() +
                       "' has no \"weight_map\" object (tensor name -> file)");
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      throw RuntimeError("'" + path.string() + "': weight_map[\"" + name +
                         "\"] must be a file name, got " + file.dump());
    const std::string f = file.get<std::string>();
    if (!files.count(f)) files[f] = read_one(path.parent_path() / f);
    auto it = files[f].find(name);
    if (it == files[f].end())
      throw RuntimeError("'" + path.string() + "' puts tensor " + name + " in " + f +
                         ", which does not hold it");
    out[name] = it->second;
  }
  return out;
}

std::vector<float> read_tensor(const std::string& name, const StEntry& e) {
  std::ifstream in(e.file, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(e.data_start + e.begin));
  std::vector<char> raw(e.end - e.begin);
  if (!in.read(raw.data(), static_cast<std::streamsize>(raw.size())))
    throw RuntimeError("safetensors '" + e.file.string() + "': cannot read tensor " + name);
  const size_t n = raw.size() / dtype_bytes(e.dtype);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (e.dtype == "F32") {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      if (e.dtype == "F16") {
        out[i] = half_to_float(h);
      } else {
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
    }
  }
  return out;
}

void write_safetensors(const fs::path& path,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                       const std::vector<const std::vector<float>*>& data,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const uint64_t bytes = 4 * data[i]->size();
    header[shapes[i].first] = {
        {"dtype", "F32"}, {"shape", shapes[i].second}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  OutputFile f(path, "safetensors file");
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.append(len, 8);
  f.append(text.data(), text.size());
  for (const auto* d : data) f.append(d->data(), 4 * d->size());
  f.commit();
}

}  // namespace loom::ckpt
