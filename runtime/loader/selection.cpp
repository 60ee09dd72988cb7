#include "loader/selection.hpp"

#include "core/errors.hpp"
#include "loader/descriptor.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/services.hpp"
#include "loader/v1_adapter.hpp"

namespace loom::plugins {

namespace {

// Re-throws a lookup failure with the config location that asked for the plugin.
template <class F>
auto located(const toml::node* where_node, const std::string& what, F&& f) {
  try {
    return f();
  } catch (const ConfigError& e) {
    std::string at = where_node ? config::where(*where_node) + ": " : std::string();
    throw ConfigError(at + what + ": " + e.what());
  } catch (const RuntimeError& e) {
    std::string at = where_node ? config::where(*where_node) + ": " : std::string();
    throw RuntimeError(at + what + ": " + e.what());
  }
}

}  // namespace

const SlotChoice* Selection::slot(const std::string& key) const {
  for (const auto& s : slots)
    if (s.slot == key) return &s;
  return nullptr;
}

Selection resolve(config::Config& cfg, Registry& registry) {
  cfg.check_sections({plugins_section()});
  const toml::table& plugins = *cfg.table().get_as<toml::table>("plugins");
  Selection sel;
  std::vector<std::string> validated;
  auto add_schema = [&](const loom_plugin* d) {
    std::string name = d->name;
    for (const auto& v : validated)
      if (v == name) return;
    validated.push_back(name);
    sel.schemas.emplace_back(name, check_options(cfg, d));
  };

  for (const auto& sk : config::slot_keys()) {
    std::string name = cfg.str(std::string("plugins.") + sk.key);
    if (name.empty()) continue;
    const toml::node* node = plugins.get(sk.key);
    Found f = located(node, "[plugins] " + std::string(sk.key),
                      [&] { return registry.find(name, sk.kind); });
    if (sk.kind == LOOM_KIND_PARALLEL && f.desc->slot != sk.slot)
      throw ConfigError(config::where(*node) + ": [plugins] " + sk.key + " = \"" + name +
                        "\" names a plugin for the " + slot_name(f.desc->slot) + " slot, not the " +
                        slot_name(sk.slot) + " slot");
    sel.slots.push_back({sk.key, f});
    add_schema(f.desc);
  }
  // Option tables for plugins that are not selected are still checked: a typo in a table the
  // user swaps in later should fail now, not after a day of training.
  for (const auto& table : cfg.plugin_option_tables()) {
    Found f = located(plugins.get(table), "[plugins." + table + "]",
                      [&] { return registry.find(table); });
    add_schema(f.desc);
  }
  // After every check: checking may add a plugin's table, filled with its defaults.
  for (SlotChoice& s : sel.slots) s.options = options_for(cfg, s.found.desc->name);
  return sel;
}

std::vector<config::KeySpec> check_options(config::Config& cfg, const loom_plugin* d) {
  const std::string name = d->name;
  std::vector<config::KeySpec> keys = config::plugin_keys(d);
  const toml::table* mine = cfg.plugin_table(name);
  for (const config::KeySpec& k : keys)
    if (k.required && (!mine || !mine->contains(k.name)))
      throw ConfigError("plugin '" + name + "' needs [plugins." + name + "] " + k.name + " (" +
                        k.help + ")");
  cfg.validate_plugin_options(name, keys);
  if (d->validate_options) {
    loom_options opts = options_for(cfg, name);
    loom_error e;
    const loom_status s = validate_plugin_options(d, &opts, &e);
    if (s == LOOM_BAD_CONFIG) throw ConfigError("[plugins." + name + "]: " + e.message);
    if (s != LOOM_OK)
      throw RuntimeError("plugin '" + name + "' failed to check its options: " + describe(e));
  }
  return keys;
}

loom_options options_for(const config::Config& cfg, const std::string& plugin) {
  return loom_options{cfg.plugin_table(plugin)};
}

std::vector<std::string> default_plugins(const config::Config& cfg, int world,
                                         const SlotDegrees& par) {
  std::vector<std::string> out;
  auto fill = [&](bool needed, const char* slot, const char* plugin) {
    if (needed && cfg.str(std::string("plugins.") + slot).empty())
      out.push_back(std::string("plugins.") + slot + "=" + plugin);
  };
  fill(world > 1, "comm", "gloo");
  fill(world > 1, "data", "ddp");
  fill(par.tp > 1, "tensor", "tp");
  fill(par.pp > 1, "pipeline", "1f1b");
  fill(par.ep > 1, "expert", "ep");
  fill(par.cp > 1, "context", "cp");
  return out;
}

std::vector<std::string> idle_slots(const config::Config& cfg, const SlotDegrees& par) {
  std::vector<std::string> notes;
  auto note = [&](const char* slot, int64_t degree, const char* key, const char* meaning) {
    const std::string plugin = cfg.str(std::string("plugins.") + slot);
    if (!plugin.empty() && degree == 1)
      notes.push_back("[plugins] " + std::string(slot) + " = \"" + plugin +
                      "\" does nothing at [parallel] " + key + " = 1 (" + meaning + "); set " +
                      key + " above 1 to use it");
  };
  note("pipeline", par.pp, "pp", "one stage");
  note("tensor", par.tp, "tp", "no tensor split");
  note("sequence", par.tp, "tp", "sequence parallelism splits over the tp group");
  note("expert", par.ep, "ep", "every rank holds every expert");
  note("context", par.cp, "cp", "no sequence split");
  return notes;
}

// ---- loom.plugins: a wrapper creates the plugin it wraps as a config selects one -------------

namespace {

struct Source {
  Registry* registry = nullptr;
  config::Config* cfg = nullptr;
};
Source& source() {
  static Source s;
  return s;
}

// A parallel plugin's setup context carries the op table of its wrapper's ABI, which is the
// wrapped plugin's own only when both were built for the same major (ABI 1 counts as 2: its
// adapter hands on ABI 2's table).
void check_same_major(const loom_plugin* inner, int caller_major) {
  const int inner_major = inner->v.major == 1 ? 2 : inner->v.major;
  if (inner->kind != LOOM_KIND_PARALLEL || inner_major == caller_major) return;
  throw ConfigError("loom.plugins: parallel plugin '" + std::string(inner->name) +
                    "' was built for plugin ABI " + std::to_string(inner->v.major) + "." +
                    std::to_string(inner->v.minor) + " and the plugin wrapping it for ABI " +
                    std::to_string(caller_major) +
                    ": the op table a wrapper passes on is its own, so rebuild the one against "
                    "the other's headers");
}

loom_status create_plugin_as(int caller_major, const char* name, int32_t kind,
                             const loom_plugin** desc, void** self, loom_error* err) {
  const loom_host& h = host();
  if (!source().registry || !source().cfg)
    return h.set_error(err, LOOM_UNAVAILABLE,
                       "loom.plugins: no configuration to create plugins from in this command");
  try {
    const std::string wanted = name ? name : "";
    Found f;
    try {
      f = source().registry->find(wanted, static_cast<loom_kind>(kind));
    } catch (const ConfigError& none) {
      // A plugin of another kind by that name says more than "no such plugin".
      Found other;
      try {
        other = source().registry->find(wanted);
      } catch (const ConfigError&) {
        throw none;
      }
      throw ConfigError("'" + wanted + "' is a " + kind_name(other.desc->kind) + " plugin, not a " +
                        kind_name(kind) + " plugin");
    }
    check_same_major(f.desc, caller_major);
    check_options(*source().cfg, f.desc);
    loom_options opts = options_for(*source().cfg, f.desc->name);
    const char* why = nullptr;
    if (score_plugin(f.desc, &why) <= 0)
      return h.set_error(err, LOOM_UNAVAILABLE,
                         ("plugin '" + std::string(f.desc->name) +
                          "' cannot run here: " + (why && *why ? why : "it gave no reason"))
                             .c_str());
    const loom_status s = create_plugin_instance(f.desc, &opts, self, err);
    if (s == LOOM_OK) *desc = f.desc;
    return s;
  } catch (const ConfigError& e) {
    return h.set_error(err, LOOM_BAD_CONFIG, e.what());
  } catch (const std::exception& e) {
    return h.set_error(err, LOOM_SYSTEM, e.what());
  }
}

void release_plugin(const loom_plugin* desc, void* self) {
  if (desc && self) destroy_plugin_instance(desc, self);
}

loom_status create_plugin(const char* name, int32_t kind, const loom_plugin** desc, void** self,
                          loom_error* err) {
  return create_plugin_as(LOOM_ABI_MAJOR, name, kind, desc, self, err);
}
loom_status create_plugin_v2(const char* name, int32_t kind, const loom_plugin** desc, void** self,
                             loom_error* err) {
  return create_plugin_as(2, name, kind, desc, self, err);
}

// loom.config: typed reads of the configuration plugins are created from, by "section.key".
template <class T, class Read>
loom_status read_config(const char* key, T* out, loom_error* err, Read read) {
  const loom_host& h = host();
  if (!source().cfg)
    return h.set_error(err, LOOM_BAD_CONFIG, "loom.config: no configuration in this command");
  try {
    *out = read(*source().cfg, std::string(key ? key : ""));
    return LOOM_OK;
  } catch (const std::exception& e) {
    return h.set_error(
        err, LOOM_BAD_CONFIG,
        ("loom.config: " + std::string(key ? key : "(null)") + ": " + e.what()).c_str());
  }
}
loom_status config_i64(const char* key, int64_t* out, loom_error* err) {
  return read_config(key, out, err,
                     [](const config::Config& c, const std::string& k) { return c.i64(k); });
}
loom_status config_f64(const char* key, double* out, loom_error* err) {
  return read_config(key, out, err,
                     [](const config::Config& c, const std::string& k) { return c.f64(k); });
}
loom_status config_str(const char* key, const char** out, loom_error* err) {
  static thread_local std::string held;  // borrowed by the caller until its next read
  return read_config(key, out, err, [](const config::Config& c, const std::string& k) {
    held = c.str(k);
    return held.c_str();
  });
}
const loom_config_reader kConfig = {LOOM_VERSION_OF(loom_config_reader), &config_i64, &config_f64,
                                    &config_str};

const loom_plugins kPlugins = {LOOM_VERSION_OF(loom_plugins), &create_plugin, &release_plugin};
const loom_plugins kPluginsV2 = {
    {2, kLastV2Minor, sizeof(loom_plugins)}, &create_plugin_v2, &release_plugin};

}  // namespace

void set_plugin_source(Registry* registry, config::Config* cfg) {
  source() = {registry, cfg};
  // the service exists while a registry does
  set_plugins_service(registry ? &kPlugins : nullptr, registry ? &kPluginsV2 : nullptr);
  set_config_service(cfg ? &kConfig : nullptr);
}

}  // namespace loom::plugins
