// loom version, loom plugins [list|info NAME]
#include <cmath>
#include <iostream>
#include <sstream>
#include <tuple>

#include "cli/parse.hpp"
#include "config/schema.hpp"
#include "core/json.hpp"
#include "loader/host.hpp"
#include "loader/isolated.hpp"
#include "loader/registry.hpp"
#include "loader/selection.hpp"
#include "loader/services.hpp"
#include "loader/v1_adapter.hpp"
#include "ops/cpu/kernels.hpp"

namespace loom::cli {

namespace {

std::string abi_of(const loom_plugin* d) {
  return std::to_string(d->v.major) + "." + std::to_string(d->v.minor);
}

// ABI 2 plugins get only the services they declare; ABI 1 ones declared none and get any.
std::string services_of(const loom_plugin* d) {
  if (plugins::v1_original(d)) return "any (ABI 1 plugins declare none)";
  std::string out;
  for (const std::string& s : plugins::declared_services(d)) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

std::string kind_slot(const loom_plugin* d) {
  std::string s = plugins::kind_name(d->kind);
  if (d->kind == LOOM_KIND_PARALLEL) s += std::string("/") + plugins::slot_name(d->slot);
  return s;
}

// ABI 1's SDK filled save_state and load_state for every precision and data plugin, so for an ABI
// 1 binary their presence says nothing. Such a plugin is created (in a child process, with its
// default options) and asked the size of its state: the bytes, or -1 when it cannot tell.
int64_t v1_state_bytes(const plugins::Found& f) {
  try {
    const std::string bytes = plugins::run_isolated(
        "plugin '" + std::string(f.desc->name) + "'",
        [&] {
          config::Config none;
          const loom_options opts = plugins::options_for(none, f.desc->name);
          plugins::Instance inst(f, &opts);
          size_t n = 0;
          loom_error err;
          const auto save = f.desc->kind == LOOM_KIND_PRECISION
                                ? reinterpret_cast<const loom_precision_v2*>(f.desc)->save_state
                                : reinterpret_cast<const loom_data_v2*>(f.desc)->save_state;
          return save(inst.self(), nullptr, 0, &n, &err) == LOOM_OK ? std::to_string(n)
                                                                    : std::string("-1");
        },
        10000);
    return std::stoll(bytes);
  } catch (const std::exception&) {
    return -1;
  }
}

// The optional entries a plugin really provides: an ABI 1 plugin whose state is empty when created
// does not list "state save and load".
std::vector<std::string> provided(const plugins::Found& f) {
  std::vector<std::string> entries = plugins::optional_entries(f.desc);
  if (plugins::v1_original(f.desc) && plugins::keeps_state(f.desc) && v1_state_bytes(f) == 0)
    std::erase(entries, std::string("state save and load"));
  return entries;
}

std::string plugin_json(const plugins::Found& f, bool with_options) {
  const loom_plugin* d = f.desc;
  std::ostringstream os;
  os << "{\"name\": " << json_quote(d->name)
     << ", \"kind\": " << json_quote(plugins::kind_name(d->kind))
     << ", \"slot\": " << json_quote(plugins::slot_name(d->slot))
     << ", \"version\": " << json_quote(d->version ? d->version : "")
     << ", \"abi\": " << json_quote(abi_of(d)) << ", \"path\": " << json_quote(f.library.string())
     << ", \"summary\": " << json_quote(d->summary ? d->summary : "");
  if (with_options) {
    os << ", \"provides\": [";
    const std::vector<std::string> entries = provided(f);
    for (size_t i = 0; i < entries.size(); ++i) os << (i ? ", " : "") << json_quote(entries[i]);
    os << "], \"services\": [";
    const std::vector<std::string> services = plugins::declared_services(d);
    for (size_t i = 0; i < services.size(); ++i) os << (i ? ", " : "") << json_quote(services[i]);
    os << "], \"adapted\": " << (plugins::v1_original(d) ? "true" : "false") << ", \"options\": [";
    bool first = true;
    for (const auto& k : config::plugin_keys(d)) {
      os << (first ? "" : ", ") << "{\"name\": " << json_quote(k.name)
         << ", \"type\": " << json_quote(config::type_name(k.type))
         << ", \"default\": " << json_quote(k.default_toml) << ", \"help\": " << json_quote(k.help)
         << "}";
      first = false;
    }
    os << "]";
  }
  os << "}";
  return os.str();
}

// For each plugin another library's plugin of the same kind and name shadows: that library. The
// rule is Registry::find's: the first search directory, then the conventional file name.
std::vector<const plugins::Found*> shadowing(const std::vector<plugins::Found>& found) {
  auto rank = [](const plugins::Found& f) {
    const std::string conventional =
        std::string("libloom-") + plugins::kind_name(f.desc->kind) + "-" + f.desc->name + ".so";
    return std::make_tuple(f.dir, f.library.filename() != conventional, f.library.string());
  };
  std::vector<const plugins::Found*> winner(found.size(), nullptr);
  for (size_t i = 0; i < found.size(); ++i)
    for (size_t j = 0; j < found.size(); ++j)
      if (i != j && found[i].desc->kind == found[j].desc->kind &&
          std::string(found[i].desc->name) == found[j].desc->name &&
          rank(found[j]) < rank(found[i]) && (!winner[i] || rank(found[j]) < rank(*winner[i])))
        winner[i] = &found[j];
  return winner;
}

int list(plugins::Registry& reg, bool json) {
  std::vector<std::string> problems;
  std::vector<plugins::Found> found = reg.all(&problems);
  const std::vector<const plugins::Found*> shadowed_by = shadowing(found);
  if (json) {
    std::cout << "{\"plugins\": [";
    for (size_t i = 0; i < found.size(); ++i) {
      std::string entry = plugin_json(found[i], false);
      entry.pop_back();  // the closing brace: two more fields
      std::cout << (i ? ",\n " : "") << entry
                << ", \"active\": " << (shadowed_by[i] ? "false" : "true") << ", \"shadowed_by\": "
                << (shadowed_by[i] ? json_quote(shadowed_by[i]->library.string()) : "null") << "}";
    }
    std::cout << "],\n \"skipped\": [";
    for (size_t i = 0; i < problems.size(); ++i)
      std::cout << (i ? ", " : "") << json_quote(problems[i]);
    std::cout << "],\n \"searched\": [";
    for (size_t i = 0; i < reg.dirs().size(); ++i)
      std::cout << (i ? ", " : "") << "{\"path\": " << json_quote(reg.dirs()[i].path.string())
                << ", \"origin\": " << json_quote(reg.dirs()[i].origin) << "}";
    std::cout << "]}\n";
    return kExitOk;
  }
  std::printf("%-14s %-20s %-9s %-5s %s\n", "NAME", "KIND/SLOT", "VERSION", "ABI", "PATH");
  for (size_t i = 0; i < found.size(); ++i) {
    const plugins::Found& f = found[i];
    std::printf("%-14s %-20s %-9s %-5s %s%s\n", f.desc->name, kind_slot(f.desc).c_str(),
                f.desc->version ? f.desc->version : "", abi_of(f.desc).c_str(), f.library.c_str(),
                shadowed_by[i] ? "  (shadowed)" : "");
  }
  for (size_t i = 0; i < found.size(); ++i) {
    const plugins::Found* w = shadowed_by[i];
    if (!w) continue;
    std::printf(
        "\nshadowed: %s in %s\n  %s wins: %s\n", found[i].desc->name, found[i].library.c_str(),
        w->library.c_str(),
        w->dir < found[i].dir
            ? ("its directory comes first in the search path (" + reg.dirs()[w->dir].origin + ")")
                  .c_str()
            : "same directory, and its file has the conventional name libloom-<kind>-<name>.so");
  }
  std::printf("\nsearched:");
  for (const auto& d : reg.dirs()) std::printf(" %s (%s)", d.path.c_str(), d.origin.c_str());
  std::printf("\n");
  for (const auto& p : problems) std::cerr << "loom: skipped: " << p << "\n";
  return kExitOk;
}

int info(plugins::Registry& reg, const std::string& name, bool json) {
  plugins::Found f = reg.find(name);
  if (json) {
    std::cout << plugin_json(f, true) << "\n";
    return kExitOk;
  }
  const loom_plugin* d = f.desc;
  std::printf("%s — %s\n  kind/slot: %s\n  version:   %s\n  abi:       %s%s\n  path:      %s\n",
              d->name, d->summary ? d->summary : "", kind_slot(d).c_str(),
              d->version ? d->version : "", abi_of(d).c_str(),
              plugins::v1_original(d) ? " (loaded through the ABI 1 adapter)" : "",
              f.library.c_str());
  if (d->kind == LOOM_KIND_CKPT || (d->kind == LOOM_KIND_PARALLEL && d->slot == LOOM_SLOT_DATA)) {
    const std::string caps = plugins::capability_names(d);
    std::printf("  declares:  %s\n",
                caps.empty() ? ("nothing" + plugins::declared_note(d)).c_str() : caps.c_str());
  }
  std::string entries;
  for (const std::string& e : provided(f)) entries += (entries.empty() ? "" : ", ") + e;
  std::printf("  provides:  %s\n", entries.empty()
                                       ? ("no optional entries" + plugins::declared_note(d)).c_str()
                                       : entries.c_str());
  std::printf("  uses:      %s\n", services_of(d).c_str());
  auto keys = config::plugin_keys(d);
  if (keys.empty()) {
    std::printf("  options:   none\n");
    return kExitOk;
  }
  std::printf("  options ([plugins.%s]):\n", d->name);
  for (const auto& k : keys) {
    std::string limits;
    if (k.required) limits += " required;";
    if (std::isfinite(k.min) || std::isfinite(k.max))
      limits += " in [" + json_number(k.min) + ", " + json_number(k.max) + "];";
    if (!k.choices.empty()) {
      limits += " one of";
      for (const auto& c : k.choices) limits += " " + c;
      limits += ";";
    }
    std::printf("    %-20s %-8s default %-10s %s%s\n", k.name.c_str(), config::type_name(k.type),
                k.required ? "(none)" : k.default_toml.c_str(), k.help.c_str(),
                limits.empty() ? "" : (" [" + limits.substr(1, limits.size() - 2) + "]").c_str());
  }
  return kExitOk;
}

}  // namespace

int version(const Args&) {
  std::printf("loom %s (plugin ABI %d.%d)\n", LOOM_VERSION_STRING, LOOM_ABI_MAJOR, LOOM_ABI_MINOR);
  std::printf("CPU GEMM: %s\n", cpu::gemm_library());
  return kExitOk;
}

int plugins(const Args& args) {
  po::options_description opts("loom plugins");
  opts.add_options()("json", "machine-readable output")(
      "path", po::value<std::vector<std::string>>()->composing(),
      "also search this directory first (repeatable)")(
      "words", po::value<std::vector<std::string>>(), "[list] | info NAME");
  po::positional_options_description pos;
  pos.add("words", -1);
  po::variables_map vm;
  if (!parse(args, "loom plugins [list | info NAME] [--json] [--path DIR]", opts, pos, vm))
    return kExitOk;
  std::vector<std::string> words =
      vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  std::vector<std::string> extra =
      vm.count("path") ? vm["path"].as<std::vector<std::string>>() : std::vector<std::string>{};
  plugins::Registry reg(plugins::Registry::default_dirs(extra));
  bool json = vm.count("json") > 0;
  if (words.empty() || (words.size() == 1 && words[0] == "list")) return list(reg, json);
  if (words.size() == 2 && words[0] == "info") return info(reg, words[1], json);
  throw UsageError("usage: loom plugins [list | info NAME] [--json]");
}

}  // namespace loom::cli

namespace loom::cli {

std::string usage() {
  return "usage: loom <command> [options]     (loom <command> --help for each)\n\n"
         "commands:\n"
         "  train FILE             train the model a config describes (--set, --run-dir)\n"
         "  data prepare           tokenise JSONL (.gz, .zst, stdin) or text files into llm.c "
         "shards (--jsonl | --text,\n"
         "                         --out; BPE: --tokenizer, --train-tokenizer; --resume); data "
         "encode: a file's ids\n"
         "  launch -n N -- CMD     run N ranks of a command with torchrun-style variables\n"
         "  bench comm             collective bandwidth, nccl-tests style (--op, --nproc)\n"
         "  compare A.toml B.toml  train both, compare speed, memory and loss; HTML report\n"
         "  doctor RUN_DIR         what a run's metrics and events say, layer by layer\n"
         "  ckpt verify|inspect DIR  check or describe a checkpoint; ckpt export DIR --out F "
         "[--format hf]\n"
         "  ckpt import SRC --out DIR  a Hugging Face folder or an llm.c model file as a "
         "checkpoint\n"
         "  generate SRC --prompt T text from a checkpoint, Hugging Face folder or llm.c file (KV "
         "cache)\n"
         "  eval SRC --data D|--text F  loss and perplexity of a model over a data set, or per "
         "token of a text\n"
         "  schedule --pp P --microbatches M --schedule S  a pipeline schedule's timeline\n"
         "  plan CONFIG --cluster FILE   predict step time, MFU and memory of every layout; rank "
         "them\n"
         "  model info PRESET|FILE params, FLOPs/token and ZeRO state bytes of a model (--dp, "
         "--json)\n"
         "  config check FILE      validate a config and the plugins it names\n"
         "  config show FILE       print the resolved config with every default filled in\n"
         "  plugins [list]         list every plugin found (--json)\n"
         "  plugins info NAME      a plugin's options, types, defaults and help (--json)\n"
         "  version                print the runtime and plugin ABI versions\n\n"
         "exit codes: 0 success, 1 runtime failure, 2 usage or config error\n";
}

}  // namespace loom::cli
