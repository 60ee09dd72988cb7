#include "data/shards.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace loom::data {

void write_shard(const fs::path& path, const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(kHeaderInts, 0);
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
    if (!out) throw RuntimeError("cannot write token shard '" + tmp.string() + "'");
  }
  fs::rename(tmp, path);  // readers never see a half-written shard
}

std::vector<uint16_t> read_shard(const fs::path& path, int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RuntimeError("cannot open token shard '" + path.string() + "'");
  std::vector<int32_t> header(kHeaderInts);
  in.read(reinterpret_cast<char*>(header.data()), header.size() * 4);
  std::string where = "token shard '" + path.string() + "': ";
  if (in.gcount() != static_cast<std::streamsize>(kHeaderInts * 4))
    throw RuntimeError(where + "shorter than the 1024-byte header");
  if (header[0] != kShardMagic)
    throw RuntimeError(where + "bad magic " + std::to_string(header[0]) + " (expected " +
                       std::to_string(kShardMagic) + "); not an llm.c token shard");
  if (header[1] != kShardVersion)
    throw RuntimeError(where + "version " + std::to_string(header[1]) + ", expected " +
                       std::to_string(kShardVersion));
  int64_t count = header[2];
  uintmax_t expected = 1024 + 2 * static_cast<uintmax_t>(count), actual = fs::file_size(path);
  if (actual != expected)
    throw RuntimeError(where + "header says " + std::to_string(count) + " tokens (" +
                       std::to_string(expected) + " bytes) but the file has " +
                       std::to_string(actual) + " bytes");
  std::vector<uint16_t> tokens(count);
  in.read(reinterpret_cast<char*>(tokens.data()), count * 2);
  auto bad = std::find_if(tokens.begin(), tokens.end(),
                          [&](uint16_t t) { return static_cast<int64_t>(t) >= vocab_size; });
  if (bad != tokens.end())
    throw RuntimeError(where + "token " + std::to_string(*bad) + " at position " +
                       std::to_string(bad - tokens.begin()) + " is outside the vocabulary (" +
                       std::to_string(vocab_size) + ")");
  return tokens;
}

std::vector<uint16_t> read_split(const fs::path& dir, const std::string& split, int64_t vocab_size) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    if (f.rfind(split + "_", 0) == 0 && f.ends_with(".bin")) files.push_back(e.path());
  }
  if (ec) throw RuntimeError("cannot read data directory '" + dir.string() + "': " + ec.message());
  if (files.empty())
    throw RuntimeError("no " + split + "_*.bin shards in '" + dir.string() +
                       "'; make them with: loom data prepare --text FILE... --out " + dir.string());
  std::sort(files.begin(), files.end());
  std::vector<uint16_t> all;
  for (const auto& f : files) {
    std::vector<uint16_t> t = read_shard(f, vocab_size);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

PrepareReport prepare_text(const std::vector<fs::path>& inputs, const fs::path& out_dir,
                           double val_fraction, int64_t shard_tokens) {
  if (inputs.empty()) throw UsageError("data prepare needs at least one --text file");
  if (val_fraction < 0 || val_fraction >= 1)
    throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(val_fraction));
  std::vector<uint16_t> train, val;
  for (const auto& f : inputs) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw RuntimeError("cannot read text file '" + f.string() + "'");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t split = bytes.size() - static_cast<size_t>(bytes.size() * val_fraction);
    for (size_t i = 0; i < bytes.size(); ++i)
      (i < split ? train : val).push_back(static_cast<unsigned char>(bytes[i]));
  }
  fs::create_directories(out_dir);
  PrepareReport r;
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(val.size());
  auto write_split = [&](const std::string& name, const std::vector<uint16_t>& tokens) {
    for (size_t begin = 0, k = 0; begin < tokens.size() || k == 0; begin += shard_tokens, ++k) {
      size_t end = std::min(tokens.size(), begin + static_cast<size_t>(shard_tokens));
      char file[64];
      std::snprintf(file, sizeof file, "%s_%06zu.bin", name.c_str(), k);
      write_shard(out_dir / file, std::vector<uint16_t>(tokens.begin() + begin, tokens.begin() + end));
      r.written.push_back(out_dir / file);
      if (end == tokens.size()) break;
    }
  };
  write_split("train", train);
  if (!val.empty()) write_split("val", val);
  return r;
}

}  // namespace loom::data
