#include "loader/registry.hpp"

#include <algorithm>
#include <boost/dll/library_info.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>

#include "core/errors.hpp"
#include "core/nearest.hpp"
#include "loader/descriptor.hpp"
#include "loader/host.hpp"
#include "loader/isolated.hpp"
#include "loader/services.hpp"
#include "loader/v1_adapter.hpp"

namespace fs = std::filesystem;

namespace loom::plugins {

namespace {

struct Library {
  boost::dll::shared_library lib;
  std::vector<const loom_plugin*> plugins;
  std::vector<std::string> skipped;  // descriptors refused, each with its reason
};

// Process-lifetime storage: a plugin's code must outlive every pointer it handed out, including
// ones still referenced from static destructors, so libraries are deliberately never released.
std::map<fs::path, Library*>& loaded() {
  static auto* m = new std::map<fs::path, Library*>();
  return *m;
}
std::mutex& loaded_mutex() {
  static auto* m = new std::mutex();
  return *m;
}

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".so");
}

// dlopen maps a library's segments as they are: one cut short by a copy or a full disk maps pages
// past the end of the file, and the first touch kills the process with SIGBUS. So the ELF header
// and the program headers are read first, and every segment must lie inside the file.
void check_elf(const fs::path& library) {
  std::ifstream in(library, std::ios::binary);
  const uint64_t size = fs::file_size(library);
  unsigned char h[64] = {};
  in.read(reinterpret_cast<char*>(h), sizeof h);
  const std::string where = "'" + library.string() + "': ";
  if (in.gcount() < 64 || h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F')
    throw RuntimeError(where + "not an ELF shared library");
  if (h[4] != 2) throw RuntimeError(where + "not a 64-bit ELF library");
  auto u16 = [](const unsigned char* p) {
    return static_cast<uint64_t>(p[0]) | static_cast<uint64_t>(p[1]) << 8;
  };
  auto u64 = [](const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
    return v;
  };
  const uint64_t phoff = u64(h + 32), shoff = u64(h + 40), phent = u16(h + 54), phnum = u16(h + 56);
  const uint64_t shent = u16(h + 58), shnum = u16(h + 60);
  uint64_t need = std::max(phoff + phent * phnum, shoff + shent * shnum);
  std::vector<unsigned char> ph(phent * phnum);
  if (phoff + ph.size() <= size) {
    in.seekg(static_cast<std::streamoff>(phoff));
    in.read(reinterpret_cast<char*>(ph.data()), static_cast<std::streamsize>(ph.size()));
    for (uint64_t i = 0; i < phnum && phent >= 40; ++i)  // p_offset at 8, p_filesz at 32
      need = std::max(need, u64(&ph[i * phent + 8]) + u64(&ph[i * phent + 32]));
  }
  if (need > size)
    throw RuntimeError(where + "truncated ELF: the file has " + std::to_string(size) +
                       " bytes, its headers and segments need " + std::to_string(need));
}

// The ABI majors a library was built for, read from its exported entry names.
std::vector<int> exported_abi_majors(const fs::path& library) {
  std::vector<int> majors;
  try {
    boost::dll::library_info info(library);
    static const std::regex entry("^loom_plugin_entry_v([0-9]+)$");
    for (const auto& sym : info.symbols()) {
      std::smatch m;
      if (std::regex_match(sym, m, entry)) majors.push_back(std::stoi(m[1]));
    }
  } catch (const std::exception&) {
  }
  return majors;
}

std::string file_prefix(std::optional<loom_kind> kind) {
  return kind ? std::string("libloom-") + kind_name(*kind) + "-" : std::string("libloom-");
}

}  // namespace

Registry::Registry(std::vector<SearchDir> dirs) : dirs_(std::move(dirs)) {}

fs::path Registry::install_dir() {
  return fs::path(boost::dll::this_line_location().parent_path().string()) / "loom" / "plugins";
}

std::vector<SearchDir> Registry::default_dirs(const std::vector<std::string>& config_path) {
  std::vector<SearchDir> dirs;
  for (const auto& p : config_path) {
    std::error_code ec;
    if (!fs::is_directory(p, ec))
      std::fprintf(stderr, "loom: warning: [plugins] path entry '%s' %s; it is skipped\n",
                   p.c_str(), fs::exists(p, ec) ? "is not a directory" : "does not exist");
    dirs.push_back({p, "[plugins] path"});
  }
  if (const char* env = std::getenv("LOOM_PLUGIN_PATH")) {
    std::string s = env;
    for (size_t start = 0; start <= s.size();) {
      size_t colon = s.find(':', start);
      std::string part = s.substr(start, colon - start);
      if (!part.empty()) dirs.push_back({part, "LOOM_PLUGIN_PATH"});
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  dirs.push_back({install_dir(), "install"});
  return dirs;
}

namespace {

// The entries this runtime speaks, newest first: ABI 3's own, ABI 2's (whose tables ABI 3 kept),
// and ABI 1's (through the adapter).
constexpr const char* kEntryV2 = "loom_plugin_entry_v2";
constexpr int kSpoken[] = {LOOM_ABI_MAJOR, 2, 1};

// A library without an entry this runtime speaks: built for another major, damaged, or no plugin.
[[noreturn]] void refuse_entryless(const fs::path& key) {
  const std::vector<int> majors = exported_abi_majors(key);
  for (int major : kSpoken)
    if (std::find(majors.begin(), majors.end(), major) != majors.end())
      throw RuntimeError("plugin library '" + key.string() + "' lists loom_plugin_entry_v" +
                         std::to_string(major) +
                         " in its symbol table, but the dynamic loader cannot find it there: the "
                         "library's dynamic "
                         "section is damaged; rebuild it");
  if (!majors.empty())
    throw RuntimeError("plugin library '" + key.string() + "' was built for Loom plugin ABI " +
                       std::to_string(majors.front()) + " (exports loom_plugin_entry_v" +
                       std::to_string(majors.front()) + "); " + runtime_abi());
  throw RuntimeError("'" + key.string() +
                     "' is not a Loom plugin: it exports no loom_plugin_entry_v3 (or _v2, _v1) "
                     "symbol");
}

// Entry `i` of the list a library's loom_plugin_entry_v<major> returned, checked (and adapted,
// for ABI 1). Throws RuntimeError naming it and its library.
const loom_plugin* checked_descriptor(const loom_plugin* raw, size_t i, int major,
                                      const fs::path& key) {
  if (!raw)
    throw RuntimeError("plugin library '" + key.string() + "': entry " + std::to_string(i) +
                       " of the list its loom_plugin_entry_v" + std::to_string(major) +
                       " returned is NULL");
  if (major == 1 && raw->v.major != v1::kMajor)  // what an ABI 1 entry returns has ABI 1's layout
    throw RuntimeError("plugin in '" + key.string() +
                       "' is returned by loom_plugin_entry_v1 but claims plugin ABI " +
                       std::to_string(raw->v.major) + "." + std::to_string(raw->v.minor) + "; " +
                       runtime_abi());
  if (major == 1) return adapt_v1(reinterpret_cast<const v1::plugin*>(raw), key.string());
  check_descriptor(raw, key.string(), major);
  declare_services(raw);  // what its host will hand it
  return raw;
}

// The newest entry `lib` exports that this runtime speaks, and that entry's major; 0 for none.
int entry_major(const boost::dll::shared_library& lib) {
  if (lib.has(LOOM_PLUGIN_ENTRY_V3)) return 3;
  if (lib.has(kEntryV2)) return 2;
  return lib.has(v1::kEntry) ? 1 : 0;
}

// dlopen, the entry and every descriptor's checks. Throws RuntimeError naming the library.
std::unique_ptr<Library> open_library(const fs::path& key) {
  check_elf(key);
  auto lib = std::make_unique<Library>();
  try {
    lib->lib.load(boost::dll::fs::path(key.string()),
                  boost::dll::load_mode::rtld_local | boost::dll::load_mode::rtld_now);
  } catch (const std::exception& e) {
    throw RuntimeError("cannot load plugin library '" + key.string() + "': " + e.what());
  }
  const int major = entry_major(lib->lib);
  if (major == 0) refuse_entryless(key);
  const loom_plugin* const* descs = nullptr;
  size_t count = 0;
  loom_error err;
  using Entry = std::remove_pointer_t<loom_plugin_entry_v3_fn>;  // ABI 2's has the same type
  const loom_status s =
      major == 1
          ? lib->lib.get<std::remove_pointer_t<v1::entry_fn>>(v1::kEntry)(
                &v1_host(), reinterpret_cast<const v1::plugin* const**>(&descs), &count, &err)
          : lib->lib.get<Entry>(major == 3 ? LOOM_PLUGIN_ENTRY_V3 : kEntryV2)(
                major == 3 ? &host() : &v2_host(), &descs, &count, &err);
  if (s != LOOM_OK)
    throw RuntimeError("plugin library '" + key.string() + "' failed to start: " + describe(err));
  if (count > 0 && !descs)
    throw RuntimeError("plugin library '" + key.string() + "': its entry reports " +
                       std::to_string(count) + " plugins and a NULL list");
  if (count > 4096)
    throw RuntimeError("plugin library '" + key.string() + "': its entry reports " +
                       std::to_string(count) + " plugins");
  // A descriptor that fails its checks is refused alone, named with its library; the library's
  // other plugins load. A library left with none is refused, with every reason.
  for (size_t i = 0; i < count; ++i) {
    try {
      lib->plugins.push_back(checked_descriptor(descs[i], i, major, key));
    } catch (const RuntimeError& e) {
      lib->skipped.push_back(e.what());
    }
  }
  if (lib->plugins.empty()) {
    std::string why;
    for (const std::string& s : lib->skipped) why += (why.empty() ? "" : "; ") + s;
    throw RuntimeError(
        why.empty() ? "plugin library '" + key.string() + "': its entry returned no plugins" : why);
  }
  return lib;
}

// The descriptors each probed library refused, from the probe's "skipped <reason>" lines.
std::map<fs::path, std::vector<std::string>>& probe_skipped() {
  static auto* m = new std::map<fs::path, std::vector<std::string>>();
  return *m;
}

// What a library holds ("<kind> <name>" per plugin), learned in a child process: a library whose
// loading or entry crashes or hangs takes only the child down. Cached per path.
const std::vector<std::string>& probe(const fs::path& key) {
  static auto* probed = new std::map<fs::path, std::vector<std::string>>();
  static auto* failed =
      new std::map<fs::path, std::string>();  // a library that hangs costs its 30 s once
  if (auto it = probed->find(key); it != probed->end()) return it->second;
  if (auto it = failed->find(key); it != failed->end()) throw RuntimeError(it->second);
  constexpr int kProbeTimeoutMs = 30000;
  auto list_plugins = [&] {  // in the child
    std::string out;
    // Never unloaded, as in the parent: a library whose unload crashes is not this probe's
    // business.
    const Library* lib = open_library(key).release();
    for (const loom_plugin* d : lib->plugins)
      out += std::string(kind_name(d->kind)) + " " + d->name + "\n";
    for (std::string why : lib->skipped) {
      std::replace(why.begin(), why.end(), '\n', ' ');
      out += "skipped " + why + "\n";
    }
    return out;
  };
  std::string listing;
  try {
    listing = run_isolated("plugin library '" + key.string() + "'", list_plugins, kProbeTimeoutMs);
  } catch (const RuntimeError& e) {
    (*failed)[key] = e.what();
    throw;
  }
  std::vector<std::string> names;
  for (size_t start = 0, nl; (nl = listing.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    const std::string line = listing.substr(start, nl - start);
    if (line.rfind("skipped ", 0) == 0)
      probe_skipped()[key].push_back(line.substr(8));
    else
      names.push_back(line);
  }
  return (*probed)[key] = names;
}

fs::path library_key(const fs::path& library) {
  std::error_code ec;
  fs::path key = fs::weakly_canonical(library, ec);
  return ec ? library : key;
}

// What a search passed over on its way to the plugin it found, on stderr, each reason once per
// process: a run that names a plugin found past a broken library still says why that one was
// skipped. Ranks a launcher started leave it to the launcher, and under srun or mpirun rank 0
// says it.
void report_skipped(const std::vector<std::string>& problems) {
  static auto* said = new std::set<std::string>();
  const char* launched = std::getenv("LOOM_LAUNCHED");
  if (launched && std::string(launched) == "1") return;
  for (const char* var : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                          "PMI_RANK"})  // torchrun-style, mpirun, srun
    if (const char* rank = std::getenv(var); rank && std::string(rank) != "0") return;
  for (const std::string& p : problems)
    if (said->insert(p).second)
      std::fprintf(stderr, "loom: plugin search: skipped: %s\n", p.c_str());
}

}  // namespace

bool Registry::holds(const fs::path& library, const std::string& name,
                     std::optional<loom_kind> kind) {
  const fs::path key = library_key(library);
  std::lock_guard<std::mutex> lock(loaded_mutex());
  if (auto it = loaded().find(key); it != loaded().end()) {
    for (const loom_plugin* d : it->second->plugins)
      if ((!kind || d->kind == *kind) && name == d->name) return true;
    return false;
  }
  for (const std::string& entry : probe(key)) {  // "<kind> <name>"
    const size_t space = entry.find(' ');
    if (entry.substr(space + 1) == name && (!kind || entry.substr(0, space) == kind_name(*kind)))
      return true;
  }
  return false;
}

const std::vector<const loom_plugin*>& Registry::load(const fs::path& library) {
  const fs::path key = library_key(library);
  std::lock_guard<std::mutex> lock(loaded_mutex());
  if (auto it = loaded().find(key); it != loaded().end()) return it->second->plugins;
  if (!fs::exists(key))
    throw RuntimeError("plugin library '" + library.string() + "' does not exist");
  probe(key);
  Library* raw = open_library(key).release();
  loaded()[key] = raw;
  return raw->plugins;
}

std::vector<std::string> Registry::skipped_in(const fs::path& library) {
  const fs::path key = library_key(library);
  std::lock_guard<std::mutex> lock(loaded_mutex());
  if (auto it = loaded().find(key); it != loaded().end()) return it->second->skipped;
  auto it = probe_skipped().find(key);
  return it == probe_skipped().end() ? std::vector<std::string>{} : it->second;
}

namespace {

// What a file named like a plugin is, when it is not a library dlopen could take.
std::string not_a_library(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  const std::string at = "'" + p.string() + "' is ";
  if (ec) {
    std::error_code lec;
    const bool link = fs::is_symlink(fs::symlink_status(p, lec));
    return at + (link ? "a link that leads to no file (" : "not readable (") + ec.message() + ")";
  }
  if (fs::is_directory(st)) return at + "a directory, not a plugin library";
  if (fs::is_fifo(st)) return at + "a FIFO, not a plugin library";
  if (fs::is_socket(st)) return at + "a socket, not a plugin library";
  if (fs::is_character_file(st) || fs::is_block_file(st))
    return at + "a device, not a plugin library";
  return "";
}

}  // namespace

std::vector<fs::path> Registry::candidates(size_t dir, const std::string& conventional,
                                           std::set<fs::path>& seen,
                                           std::vector<std::string>& problems) const {
  std::vector<fs::path> here;
  std::error_code ec;
  if (!fs::is_directory(dirs_[dir].path, ec)) return here;
  const std::string prefix = file_prefix(std::nullopt);
  for (const auto& e : fs::directory_iterator(dirs_[dir].path, ec)) {
    std::string f = e.path().filename().string();
    if (f.rfind(prefix, 0) != 0 || !f.ends_with(".so")) continue;
    // Only regular files (or links to them): dlopen on a FIFO named like a plugin would block
    // every command that looks for plugins. The others are named, not passed over in silence.
    const std::string what = not_a_library(e.path());
    if (what.empty())
      here.push_back(e.path());
    else if (seen.insert(e.path()).second)
      problems.push_back(what);
  }
  std::sort(here.begin(), here.end(), [&](const fs::path& a, const fs::path& b) {
    const bool ca = a.filename() == conventional, cb = b.filename() == conventional;
    return ca != cb ? ca : a < b;
  });
  std::vector<fs::path> out;
  for (auto& p : here)
    if (seen.insert(fs::weakly_canonical(p, ec)).second) out.push_back(p);
  return out;
}

Found Registry::find(const std::string& name, std::optional<loom_kind> kind) {
  auto matches = [&](const loom_plugin* d) {
    return (!kind || d->kind == *kind) && (looks_like_path(name) || name == d->name);
  };
  if (looks_like_path(name)) {
    for (const loom_plugin* d : load(name))
      if (matches(d)) return {d, name, -1};
    throw ConfigError("plugin library '" + name + "' holds no " +
                      (kind ? std::string(kind_name(*kind)) + " " : "") + "plugin");
  }
  // Directory by directory, the conventional file name first: usually one library is loaded.
  std::vector<std::string> problems;
  std::set<fs::path> seen;
  const std::string conventional = kind ? file_prefix(kind) + name + ".so" : "";
  for (size_t d = 0; d < dirs_.size(); ++d)
    for (const fs::path& p : candidates(d, conventional, seen, problems)) {
      try {
        const bool here = holds(
            p, name, kind);  // probed in a child: a library the run does not name is never loaded
        for (const std::string& s : skipped_in(p)) problems.push_back(s);
        if (!here) continue;
        for (const loom_plugin* desc : load(p))
          if (matches(desc)) {
            report_skipped(problems);
            return {desc, p, static_cast<int>(d)};
          }
      } catch (const std::exception& e) {
        if (p.filename() == conventional)
          throw;  // the library named for this plugin: its reason is the answer
        problems.push_back(e.what());
      }
    }

  std::vector<Found> every = all();
  std::vector<std::string> names;
  std::string listing;
  for (const auto& f : every) {
    if (kind && f.desc->kind != *kind) continue;
    names.push_back(f.desc->name);
    listing += "\n  " + std::string(f.desc->name) + " (" + kind_name(f.desc->kind) + ") " +
               f.library.string();
  }
  std::string msg = "no " + (kind ? std::string(kind_name(*kind)) + " " : std::string()) +
                    "plugin named '" + name + "'" + did_you_mean(name, names) + "\nsearched:";
  for (const auto& d : dirs_) msg += "\n  " + d.path.string() + " (" + d.origin + ")";
  msg += "\nfound:" + (listing.empty() ? std::string(" none") : listing);
  for (const auto& p : problems) msg += "\nskipped: " + p;
  throw ConfigError(msg);
}

std::vector<Found> Registry::all(std::vector<std::string>* problems) {
  std::vector<Found> out;
  std::set<fs::path> seen;
  std::vector<std::string> found_problems;
  for (size_t d = 0; d < dirs_.size(); ++d)
    for (const auto& path : candidates(d, "", seen, found_problems)) {
      try {
        for (const loom_plugin* desc : load(path)) out.push_back({desc, path, static_cast<int>(d)});
        for (const std::string& s : skipped_in(path)) found_problems.push_back(s);
      } catch (const std::exception& e) {
        found_problems.push_back(e.what());
      }
    }
  if (problems) problems->insert(problems->end(), found_problems.begin(), found_problems.end());
  return out;
}

Instance::Instance(const Found& found, const loom_options* options) : desc_(found.desc) {
  const char* why = nullptr;
  if (score_plugin(desc_, &why) <= 0)
    throw RuntimeError("plugin '" + std::string(desc_->name) +
                       "' cannot run here: " + (why && *why ? why : "it gave no reason"));
  loom_error err;
  loom_status s = create_plugin_instance(desc_, options, &self_, &err);
  if (s != LOOM_OK) {
    self_ = nullptr;
    std::string msg = "plugin '" + std::string(desc_->name) + "' failed to start: " + describe(err);
    if (s == LOOM_BAD_CONFIG) throw ConfigError(msg);
    throw RuntimeError(msg);
  }
}

Instance::~Instance() {
  if (self_) destroy_plugin_instance(desc_, self_);
}

}  // namespace loom::plugins
