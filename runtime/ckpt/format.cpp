#include "ckpt/format.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckpt/crc32c.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_read.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace loom::ckpt {

namespace {

std::vector<char> read_from_disk(const fs::path& p) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec))
    throw RuntimeError("checkpoint file " + p.string() + " is missing");
  const std::string bytes = read_file(p, "checkpoint file");
  return std::vector<char>(bytes.begin(), bytes.end());
}

json part_json(const Part& p) {
  json j = {{"tensor", p.tensor},
            {"local_shape", p.local_shape},
            {"offset", p.offset},
            {"slice",
             {{"dim", p.slice.dim},
              {"fused", p.slice.fused},
              {"begin", p.slice.begin},
              {"length", p.slice.length}}}};
  if (p.flat_count >= 0) j["flat"] = {{"begin", p.flat_begin}, {"count", p.flat_count}};
  return j;
}

json file_json(const File& f) {
  json parts = json::array();
  for (const auto& p : f.parts) parts.push_back(part_json(p));
  return {{"name", f.name}, {"bytes", f.bytes}, {"crc32c", f.crc32c}, {"parts", parts}};
}

File file_of(const json& j) {
  File f{j.at("name").get<std::string>(),
         json_integer<int64_t>(j.at("bytes"), "\"bytes\""),
         json_integer<uint32_t>(j.at("crc32c"), "\"crc32c\""),
         {}};
  for (const auto& p : j.at("parts")) {
    Part part{p.at("tensor").get<std::string>(),
              json_integers<int64_t>(p.at("local_shape"), "\"local_shape\""),
              {},
              json_integer<int64_t>(p.at("offset"), "\"offset\"")};
    const auto& s = p.at("slice");
    part.slice.dim = json_integer<int>(s.at("dim"), "\"slice.dim\"");
    part.slice.fused = json_integer<int>(s.at("fused"), "\"slice.fused\"");
    part.slice.begin = json_integer<int64_t>(s.at("begin"), "\"slice.begin\"");
    part.slice.length = json_integer<int64_t>(s.at("length"), "\"slice.length\"");
    if (p.contains("flat")) {
      part.flat_begin = json_integer<int64_t>(p.at("flat").at("begin"), "\"flat.begin\"");
      part.flat_count = json_integer<int64_t>(p.at("flat").at("count"), "\"flat.count\"");
    }
    f.parts.push_back(std::move(part));
  }
  return f;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

int64_t Part::count() const { return flat_count >= 0 ? flat_count : numel(local_shape); }

std::string step_name(int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step-%08lld", static_cast<long long>(step));
  return b;
}

void write_json(const fs::path& file, const Manifest& m) {
  json files = json::array();
  for (const auto& f : m.files) files.push_back(file_json(f));
  // Loom's randomness is counter-based (Philox keyed by the seed, counters from the step and the
  // sample), so the RNG state and the data position are the step itself; said here for readers.
  json j = {{"format", "loom-checkpoint-1"},
            {"step", m.step},
            {"applied", m.applied},
            {"layout", m.layout},
            {"rng",
             "philox4x32, counter-based: keyed by [run] seed, counters (step, sample); resumes at "
             "step + 1"},
            {"data_position", {{"next_step", m.step + 1}}},
            {"precision", {{"plugin", m.precision}, {"state", file_json(m.precision_state)}}},
            {"shapes", m.shapes},
            {"files", files},
            {"config", m.config},
            {"plugins", m.plugins}};
  write_durable(file, j.dump(1) + "\n");
}

void write_durable(const fs::path& file, const std::string& text) {
  OutputFile out(file, "file");
  out.append(text.data(), text.size());
  out.commit(true);
}

void sync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) ::fsync(fd), ::close(fd);
}

namespace {

// A hand-edited manifest must fail here, not index out of bounds in assemble: every part names
// a known tensor, has its rank, lies inside its file, and its slice inside the global shape.
void check_parts(const fs::path& file, const Manifest& m) {
  // Sums and products below are taken in 128 bits: a hand-edited offset near 2^63 must read as
  // "outside its file", not wrap around to a small number that passes.
  using wide = __int128;
  constexpr wide kMaxElements = wide(1) << 48;
  for (const auto& [tensor, g] : m.shapes) {
    wide n = 1;
    for (int64_t d : g) n = d > 0 && n * d <= kMaxElements ? n * d : -1;
    if (n < 0 || g.empty())
      throw RuntimeError(file.string() + ": tensor " + tensor +
                         " has a shape with a dimension below 1 or over 2^48 elements");
  }
  for (const auto& f : m.files) {
    if (f.bytes < 0) throw RuntimeError(file.string() + ": " + f.name + " has a negative size");
    for (const auto& p : f.parts) {
      const std::string where = file.string() + ": " + f.name + ", tensor " + p.tensor + ": ";
      auto it = m.shapes.find(p.tensor);
      if (it == m.shapes.end()) throw RuntimeError(where + "not among the manifest's shapes");
      const auto& g = it->second;
      const auto& l = p.local_shape;
      if (l.size() != g.size())
        throw RuntimeError(where + "local and global shapes differ in rank");
      const Slice& s = p.slice;
      for (size_t d = 0; d < g.size(); ++d) {
        const bool split = s.length >= 0 && static_cast<int>(d) == s.dim;
        const wide want = split ? wide(s.length) * s.fused : wide(g[d]);
        if (g[d] <= 0 || l[d] != want)
          throw RuntimeError(where + "local shape does not match its slice");
      }
      if (s.length >= 0 &&
          (s.dim < 0 || s.dim >= static_cast<int>(g.size()) || s.fused < 1 || s.begin < 0 ||
           g[s.dim] % s.fused != 0 || wide(s.begin) + s.length > g[s.dim] / s.fused))
        throw RuntimeError(where + "slice lies outside the tensor");
      if (p.flat_count >= 0 && (p.flat_begin < 0 || wide(p.flat_begin) + p.flat_count > numel(l)))
        throw RuntimeError(where + "flat range lies outside its slice");
      if (p.offset < 0 || wide(p.offset) + wide(4) * p.count() > f.bytes)
        throw RuntimeError(where + "lies outside its file");
    }
  }
}

// Where a reader who named the wrong folder may find checkpoints: the roots (folders holding
// `latest`) below `dir` and below ./runs, a few levels down, at most four named. A run keeps its
// checkpoints in RUN_DIR/checkpoints unless [checkpoint] dir says otherwise, which a newcomer who
// exports from the folder the docs named does not know.
std::string where_checkpoints_are(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const fs::path& top : {dir, fs::path("runs")}) {
    if (!fs::is_directory(top, ec)) continue;
    fs::recursive_directory_iterator it(top, fs::directory_options::skip_permission_denied, ec),
        end;
    for (int seen = 0; !ec && it != end && seen < 2000 && found.size() < 4;
         it.increment(ec), ++seen) {
      if (it.depth() > 2) it.disable_recursion_pending();
      if (it->path().filename() == "latest" && it->is_regular_file(ec))
        found.push_back(it->path().parent_path().string());
    }
  }
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  std::string out =
      " (a checkpoint is a step directory, a root holding `latest`, or a run directory; a run "
      "saves into "
      "RUN_DIR/checkpoints unless [checkpoint] dir says otherwise";
  if (found.empty()) return out + ")";
  out += "; checkpoints found:";
  for (const std::string& f : found) out += " " + f;
  return out + ")";
}

}  // namespace

Manifest read_manifest(const fs::path& dir, const std::string& name) {
  const fs::path file = dir / name;
  std::ifstream in(file);
  if (!in) {
    std::error_code ec;
    if (!fs::exists(dir, ec))
      throw RuntimeError("checkpoint '" + dir.string() + "' does not exist");
    if (!fs::is_directory(dir, ec))
      throw RuntimeError("'" + dir.string() + "' is a file, not a checkpoint directory");
    throw RuntimeError("'" + dir.string() + "' is not a complete checkpoint: it has no " + name +
                       where_checkpoints_are(dir));
  }
  Manifest m;
  try {
    json j = json::parse(in);
    if (j.value("format", "") != "loom-checkpoint-1")
      throw RuntimeError("format is '" + j.value("format", std::string("(none)")) +
                         "', expected loom-checkpoint-1");
    m.step = json_integer<int64_t>(j.at("step"), "\"step\"");
    m.applied = json_integer<int64_t>(j.at("applied"), "\"applied\"");
    if (m.step < 0)
      throw RuntimeError("\"step\" is " + std::to_string(m.step) + "; a step count is 0 or more");
    if (m.applied < 0 || m.applied > m.step)
      throw RuntimeError("\"applied\" is " + std::to_string(m.applied) +
                         "; the updates applied are from 0 to the step (" + std::to_string(m.step) +
                         ")");
    for (const auto& [axis, degree] : j.at("layout").items())
      m.layout[axis] = json_integer<int64_t>(degree, "\"layout." + axis + "\"");
    m.precision = j.at("precision").at("plugin").get<std::string>();
    m.precision_state = file_of(j.at("precision").at("state"));
    for (const auto& [name, shape] : j.at("shapes").items())
      m.shapes[name] = json_integers<int64_t>(shape, "\"shapes." + name + "\"");
    for (const auto& f : j.at("files")) m.files.push_back(file_of(f));
    if (j.contains("plugins"))
      m.plugins = j["plugins"].get<std::vector<std::map<std::string, std::string>>>();
    m.config = j.at("config").get<std::string>();
    check_parts(file, m);
  } catch (const json::exception& e) {
    throw RuntimeError(file.string() + " is damaged: " + e.what());
  } catch (const RuntimeError& e) {
    throw RuntimeError(file.string() + " is damaged: " + e.what());
  }
  return m;
}

const Reader& disk_reader() {
  static const Reader r{
      [](const fs::path& dir, const std::string& name) { return read_from_disk(dir / name); },
      [](const fs::path& dir, const std::string& name) -> int64_t {
        std::error_code ec;
        const auto n = fs::file_size(dir / name, ec);
        return ec ? -1 : static_cast<int64_t>(n);
      },
      "disk"};
  return r;
}

std::string data_state_file(int rank) {
  char b[40];
  std::snprintf(b, sizeof b, "data-state-%05d.bin", rank);
  return b;
}

uint32_t checksum(const Reader& reader, const fs::path& dir, const std::string& name) {
  if (reader.via != "disk") {
    const std::vector<char> bytes = reader.read(dir, name);
    return crc32c(bytes.data(), bytes.size());
  }
  // From disk in 4 MiB pieces: no buffer the size of the file, which would cost its page faults.
  const fs::path path = dir / name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError("cannot read checkpoint file '" + path.string() +
                       "': " + std::strerror(errno));
  std::vector<char> piece(4 << 20);
  uint32_t crc = 0;
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, piece.data(), piece.size(), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw RuntimeError("cannot read checkpoint file '" + path.string() + "': " + why);
    }
    if (n == 0) break;
    crc = crc32c(piece.data(), static_cast<size_t>(n), crc);
    at += n;
  }
  ::close(fd);
  return crc;
}

void verify(const fs::path& dir, const Manifest& m, const Reader& reader) {
  std::vector<const File*> all;
  for (const auto& f : m.files) all.push_back(&f);
  all.push_back(&m.precision_state);
  for (const File* f : all) {
    std::string holds;
    for (size_t i = 0; i < f->parts.size() && i < 4; ++i)
      holds += (i ? ", " : "") + f->parts[i].tensor;
    if (f->parts.size() > 4) holds += ", ... (" + std::to_string(f->parts.size()) + " tensors)";
    const std::string what =
        (dir / f->name).string() + (holds.empty() ? "" : " (holds " + holds + ")");
    const std::string through = reader.via == "disk" ? "" : " (read through " + reader.via + ")";
    const int64_t size = reader.size(dir, f->name);
    if (size < 0) throw RuntimeError("checkpoint file " + what + " is missing" + through);
    if (size != f->bytes)
      throw RuntimeError("checkpoint file " + what + " is " + std::to_string(size) +
                         " bytes, the manifest says " + std::to_string(f->bytes) + through);
    const uint32_t crc = checksum(reader, dir, f->name);
    if (crc != f->crc32c) {
      char b[96];
      std::snprintf(b, sizeof b, ": checksum mismatch (crc32c %08x, the manifest says %08x)", crc,
                    f->crc32c);
      throw RuntimeError("checkpoint file " + what + b + through);
    }
  }
  check_coverage(dir, m);
}

void check_coverage(const fs::path& dir, const Manifest& m) {
  std::map<std::string, int64_t> covered;
  for (const auto& f : m.files)
    for (const auto& p : f.parts) covered[p.tensor] += p.count();
  for (const auto& [name, shape] : m.shapes)
    if (covered[name] != numel(shape))
      throw RuntimeError("checkpoint " + dir.string() + ": tensor " + name + " has " +
                         std::to_string(covered[name]) + " of its " + std::to_string(numel(shape)) +
                         " elements in the files");
}

std::vector<float> assemble(const fs::path& dir, const Manifest& m, const std::string& name,
                            std::map<std::string, std::vector<char>>& files, const Reader& reader) {
  auto it = m.shapes.find(name);
  if (it == m.shapes.end())
    throw RuntimeError("checkpoint " + dir.string() + " has no tensor " + name);
  const std::vector<int64_t>& global = it->second;
  std::vector<float> out(static_cast<size_t>(numel(global)));
  for (const auto& f : m.files) {
    for (const auto& p : f.parts) {
      if (p.tensor != name) continue;
      std::vector<char>& bytes = files[f.name];
      if (bytes.empty()) bytes = reader.read(dir, f.name);
      const int64_t n = p.count();
      if (p.offset + 4 * n > static_cast<int64_t>(bytes.size()))
        throw RuntimeError("checkpoint file " + (dir / f.name).string() +
                           " is too short for tensor " + name);
      const float* src = reinterpret_cast<const float*>(bytes.data() + p.offset);
      for (int64_t i = 0; i < n; ++i)
        out[global_index(p.flat_begin + i, p.local_shape, global, p.slice)] = src[i];
    }
  }
  return out;
}

bool is_step_name(const std::string& s) {
  if (s.rfind("step-", 0) != 0 || s.size() < 13) return false;
  return std::all_of(s.begin() + 5, s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string existing_checkpoints(const fs::path& root) {
  std::error_code ec;
  std::string latest;
  if (std::ifstream in(root / "latest"); in && std::getline(in, latest) && !latest.empty())
    return "latest: " + latest;
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory(ec) && is_step_name(e.path().filename().string()))
      steps.push_back(e.path().filename().string());
  if (steps.empty()) return "";
  std::sort(steps.begin(), steps.end());
  return steps.back() +
         (steps.size() > 1 ? " and " + std::to_string(steps.size() - 1) + " more" : "");
}

fs::path find_checkpoint(const fs::path& p) {
  std::error_code ec;
  if (fs::exists(p / "manifest.json", ec)) return p;
  if (fs::exists(p / "latest", ec)) return resolve(p, "latest");
  if (fs::exists(p / "checkpoints" / "latest", ec)) return resolve(p / "checkpoints", "latest");
  if (fs::exists(p / "metrics.jsonl", ec))
    throw RuntimeError("run directory '" + p.string() +
                       "' holds no checkpoint in checkpoints/ (it trained with [checkpoint] "
                       "every = 0, or saved under another [checkpoint] dir: name that one)");
  return p;
}

fs::path resolve(const fs::path& root, const std::string& which) {
  if (which != "latest") return which;
  const fs::path latest = root / "latest";
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw RuntimeError("resume = \"latest\": the checkpoint directory " + root.string() +
                       " does not exist");
  if (!fs::exists(latest, ec))
    throw RuntimeError("resume = \"latest\": " + latest.string() +
                       " does not exist (no checkpoint was committed there)");
  std::ifstream in(latest);
  if (!in)
    throw RuntimeError("resume = \"latest\": cannot read " + latest.string() + ": " +
                       std::strerror(errno));
  std::string name;
  if (!(in >> name))
    throw RuntimeError("resume = \"latest\": " + latest.string() +
                       " is empty: it names no checkpoint");
  if (!fs::is_directory(root / name, ec))
    throw RuntimeError("resume = \"latest\": " + latest.string() + " names " + name +
                       ", which is not in " + root.string());
  return root / name;
}

}  // namespace loom::ckpt
