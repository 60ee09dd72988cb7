#include "ckpt/reader.hpp"

#include "config/config.hpp"
#include "config/schema.hpp"
#include "core/errors.hpp"
#include "loader/host.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/selection.hpp"

namespace fs = std::filesystem;

namespace loom::ckpt {

bool reads_back(const loom_plugin* d) {
  return d && d->kind == LOOM_KIND_CKPT && reinterpret_cast<const loom_ckpt_v2*>(d)->read;
}

Reader reader_of(const plugins::Instance& writer) {
  if (!reads_back(writer.desc())) return disk_reader();
  const loom_ckpt_v2* t = writer.table<loom_ckpt_v2>();
  void* self = writer.self();
  const std::string via = "plugin '" + std::string(writer.desc()->name) + "'";
  Reader r;
  r.via = via;
  // size: read with no buffer; a file the writer does not hold is LOOM_SYSTEM, i.e. missing.
  r.size = [t, self](const fs::path& dir, const std::string& name) -> int64_t {
    loom_error e;
    size_t n = 0;
    return t->read(self, dir.c_str(), name.c_str(), nullptr, 0, &n, &e) == LOOM_OK
               ? static_cast<int64_t>(n)
               : -1;
  };
  r.read = [t, self, via](const fs::path& dir, const std::string& name) {
    loom_error e;
    size_t n = 0;
    std::vector<char> bytes;
    loom_status s = t->read(self, dir.c_str(), name.c_str(), nullptr, 0, &n, &e);
    if (s == LOOM_OK) {
      bytes.resize(n);
      s = t->read(self, dir.c_str(), name.c_str(), bytes.data(), n, &n, &e);
    }
    if (s != LOOM_OK)
      throw RuntimeError("checkpoint file " + (dir / name).string() + ": " + via +
                         " cannot read it: " + e.message);
    bytes.resize(n);
    return bytes;
  };
  return r;
}

namespace {

// The descriptor of the ckpt plugin a manifest records, or nullptr when it records none.
plugins::Found recorded_writer(const Manifest& m, plugins::Registry& reg) {
  for (const auto& p : m.plugins) {
    auto slot = p.find("slot"), name = p.find("name"), lib = p.find("library");
    if (slot == p.end() || slot->second != "ckpt" || name == p.end()) continue;
    std::error_code ec;
    if (lib != p.end() && fs::exists(lib->second, ec))
      for (const loom_plugin* d : reg.load(lib->second))
        if (name->second == d->name) return {d, lib->second};
    return reg.find(name->second, LOOM_KIND_CKPT);
  }
  return {};
}

}  // namespace

CheckpointReader::CheckpointReader(const fs::path& dir, const Manifest& m)
    : reader_(disk_reader()) {
  plugins::Registry reg(plugins::Registry::default_dirs());
  const plugins::Found found = recorded_writer(m, reg);
  if (!reads_back(found.desc)) return;  // files stored as given: read them from disk
  const std::string name = found.desc->name;
  config::Config cfg = m.config.empty()
                           ? config::Config::parse("[run]\n", "manifest")
                           : config::Config::parse(m.config, (dir / "manifest.json").string());
  cfg.check_sections({plugins::plugins_section()});
  plugins::check_options(cfg, found.desc);
  loom_options opts = plugins::options_for(cfg, name);
  writer_ = std::make_unique<plugins::Instance>(found, &opts);
  const loom_ckpt_v2* t = writer_->table<loom_ckpt_v2>();
  loom_error e;
  plugins::check(t->open(writer_->self(), dir.parent_path().c_str(), 0, 1, &e), e,
                 "ckpt plugin '" + name + "' open");
  reader_ = reader_of(*writer_);
}

CheckpointReader::~CheckpointReader() = default;

}  // namespace loom::ckpt
