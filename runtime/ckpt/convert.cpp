#include "ckpt/convert.hpp"

#include <unistd.h>

#include <cstring>
#include <fstream>

#include "ckpt/convert_util.hpp"
#include "ckpt/crc32c.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;

namespace loom::ckpt {

ExternalModel read_external(const fs::path& src) {
  if (fs::is_directory(src)) return convert::read_hf(src);
  if (!fs::exists(src)) throw RuntimeError("'" + src.string() + "' does not exist");
  return convert::read_llmc(src);
}

void check_import_target(const fs::path& root) {
  const std::string held = existing_checkpoints(root);
  if (!held.empty())
    throw ConfigError("'" + root.string() + "' already holds checkpoints (" + held +
                      "); an import writes step-00000000 and "
                      "points `latest` at it, so a later resume = \"latest\" there would start "
                      "that run over. Import into "
                      "a new directory and name it in [model] init_from or checkpoint.resume");
  fs::path existing =
      root;  // the directory, or the nearest parent that exists: nothing is created yet
  std::error_code ec;
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec))
    throw RuntimeError("cannot import into '" + root.string() + "': '" + existing.string() +
                       "' is a file");
  if (::access(existing.c_str(), W_OK) != 0)
    throw RuntimeError("cannot import into '" + root.string() + "': '" + existing.string() +
                       "' is not writable: " + std::strerror(errno));
}

void write_as_checkpoint(const ExternalModel& m, const fs::path& root) {
  check_import_target(root);
  const std::string name = step_name(0);
  const fs::path tmp = root / (name + ".tmp"), dir = root / name;
  fs::create_directories(tmp);
  Manifest man;
  man.layout = {{"world", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 1}, {"cp", 1}};
  man.precision = "fp32";
  man.precision_state.name = "precision.bin";
  man.config = "# imported from " + m.source + "\n[model]\n" + m.model_toml;
  File f;
  f.name = "rank-00000.bin";
  OutputFile out(tmp / f.name, "checkpoint file");
  uint32_t crc = 0;
  int64_t offset = 0;
  for (const auto& [tensor, data] : m.tensors) {
    for (const char* suffix : {"", ".adam_m", ".adam_v"}) {
      Part p;
      p.tensor = tensor + suffix;
      p.local_shape = m.shapes.at(tensor);
      p.offset = offset;
      f.parts.push_back(p);
      man.shapes[p.tensor] = p.local_shape;
      const std::vector<float> zeros(*suffix ? data.size() : 0, 0.f);
      const std::vector<float>& w = *suffix ? zeros : data;
      out.append(w.data(), 4 * w.size());
      crc = crc32c(w.data(), 4 * w.size(), crc);
      offset += static_cast<int64_t>(4 * w.size());
    }
  }
  out.commit(true);
  f.bytes = offset;
  f.crc32c = crc;
  man.files.push_back(f);
  std::ofstream(tmp / "precision.bin", std::ios::binary).close();
  man.precision_state.crc32c = crc32c(nullptr, 0);
  write_json(tmp / "manifest.json", man);
  check_coverage(tmp, man);
  if (fs::exists(dir)) fs::remove_all(dir);
  fs::rename(tmp, dir);
  write_durable(root / "latest", name + "\n");
  write_durable(root / "model.toml", man.config);
  for (const auto& [name, bytes] : m.side_files) write_durable(root / name, bytes);
}

}  // namespace loom::ckpt
