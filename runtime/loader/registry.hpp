// Plugin discovery and loading. A plugin is named in a config by its name ("zero2") or by a path
// to its library. Names are looked up as libloom-<kind>-<name>.so in the search directories, then
// by reading the descriptors of every libloom-<kind>-*.so there (one library may carry several
// names). Libraries are loaded RTLD_LOCAL and never unloaded while the process runs.
#pragma once

#include <loom/plugin.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace loom::plugins {

struct SearchDir {
  std::filesystem::path path;
  std::string origin;  // "[plugins] path", "LOOM_PLUGIN_PATH", "install"
};

struct Found {
  const loom_plugin* desc = nullptr;
  std::filesystem::path library;
  int dir = -1;  // its search directory (index into dirs()); -1 when named by path
};

class Registry {
 public:
  explicit Registry(std::vector<SearchDir> dirs);
  // [plugins] path entries, then LOOM_PLUGIN_PATH, then the install's plugin directory.
  static std::vector<SearchDir> default_dirs(const std::vector<std::string>& config_path = {});
  // Where the built-in plugins live: <dir of the runtime library>/loom/plugins.
  static std::filesystem::path install_dir();

  const std::vector<SearchDir>& dirs() const { return dirs_; }

  // The plugin `name_or_path` of this kind (any kind when nullopt). When several libraries hold a
  // plugin of that name, the first search directory wins, and within it the conventional file
  // name libloom-<kind>-<name>.so, then the others in file-name order. Throws ConfigError when it
  // is not found (listing the directories searched and the plugins that were), RuntimeError when
  // a library cannot be used (not a plugin, ABI mismatch, failing entry).
  Found find(const std::string& name_or_path, std::optional<loom_kind> kind = std::nullopt);

  // Every plugin in the search directories, in the order find() prefers them. Libraries that fail
  // to load, descriptors refused inside a library that loads, and files named like a plugin that
  // are no library are reported in `problems` instead of throwing.
  std::vector<Found> all(std::vector<std::string>* problems = nullptr);

  // The descriptors `library` holds that were refused, each with its reason (a NULL entry, a
  // table that fails its checks): the library's other plugins load without them.
  static std::vector<std::string> skipped_in(const std::filesystem::path& library);

  // Whether `library` holds plugin `name` (of this kind), learned without loading it into this
  // process (see probe in registry.cpp). Throws RuntimeError when the library cannot be used.
  bool holds(const std::filesystem::path& library, const std::string& name,
             std::optional<loom_kind> kind);

  // Loads one library and returns its descriptors (cached). It is first opened in a child
  // process, so a library that crashes or hangs while loading is an error, not a dead process.
  // Throws RuntimeError.
  const std::vector<const loom_plugin*>& load(const std::filesystem::path& library);

 private:
  // The plugin libraries (libloom-*.so) in search directory `dir`, `first` (a file name) first if
  // it is there, then in file-name order, skipping those in `seen`.
  // Files named like a plugin that are no library (a directory, a FIFO, a link to nothing) go to
  // `problems`, each with what it is.
  std::vector<std::filesystem::path> candidates(size_t dir, const std::string& first,
                                                std::set<std::filesystem::path>& seen,
                                                std::vector<std::string>& problems) const;
  std::vector<SearchDir> dirs_;
};

// Creates and owns one plugin instance; destroys it when it goes out of scope.
class Instance {
 public:
  // Checks score() first; throws RuntimeError with the plugin's own reason or message.
  Instance(const Found& found, const loom_options* options);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const loom_plugin* desc() const { return desc_; }
  void* self() const { return self_; }
  template <class Table>
  const Table* table() const {
    return reinterpret_cast<const Table*>(desc_);
  }

 private:
  const loom_plugin* desc_;
  void* self_ = nullptr;
};

}  // namespace loom::plugins
