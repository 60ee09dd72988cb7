// loom ckpt verify DIR | inspect DIR | export DIR --format safetensors|hf --out PATH
// loom ckpt import SRC --out DIR   (a Hugging Face folder or an llm.c model file)
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/convert.hpp"
#include "ckpt/format.hpp"
#include "ckpt/reader.hpp"
#include "ckpt/safetensors.hpp"
#include "cli/model_source.hpp"
#include "cli/parse.hpp"
#include "config/section.hpp"
#include "core/files.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

// A step directory, or a checkpoint root whose `latest` names one.
fs::path step_dir(const std::string& arg) { return ckpt::find_checkpoint(arg); }

bool is_moment(const std::string& name) {
  return name.size() > 7 && (name.ends_with(".adam_m") || name.ends_with(".adam_v"));
}

// Every tensor but the AdamW moments, fp32, in one .safetensors file written whole or not at all.
void export_safetensors(const fs::path& dir, const ckpt::Manifest& m, const ckpt::Reader& reader,
                        const fs::path& out) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  std::vector<std::vector<float>> tensors;
  std::map<std::string, std::vector<char>> files;
  double bytes = 0;
  for (const auto& [name, shape] : m.shapes) {
    if (is_moment(name)) continue;  // optimizer state stays in the checkpoint
    shapes.push_back({name, shape});
    tensors.push_back(ckpt::assemble(dir, m, name, files, reader));
    bytes += 4.0 * static_cast<double>(tensors.back().size());
  }
  std::vector<const std::vector<float>*> data;
  for (const auto& t : tensors) data.push_back(&t);
  ckpt::write_safetensors(out, shapes, data,
                          {{"format", "pt"}, {"loom_step", std::to_string(m.step)}});
  std::printf("wrote %s: %zu tensors, %.1f MiB (step %lld)\n", out.c_str(), tensors.size(),
              bytes / 1048576.0, (long long)m.step);
}

// A tokenizer named at import, read as Loom will read it, so a file generation cannot use is
// refused before anything is written.
std::string checked_tokenizer(const fs::path& file, const ckpt::ExternalModel& model) {
  load_tokenizer(
      file,
      model::read_model(external_model_config(model, model.source).section("model")).vocab_size);
  return read_file(file, "tokenizer");
}

// An export never replaces an earlier one unasked, as a run never writes over an earlier run:
// the file, or a folder with anything in it, is refused before the checkpoint is read.
void refuse_used_output(const fs::path& out, const std::string& format) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  const bool folder = fs::is_directory(out, ec);
  if (folder && fs::is_empty(out, ec)) return;
  std::string held;
  if (folder) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(out, ec)) {
      if (++n > 4) {
        held += ", ...";
        break;
      }
      held += (held.empty() ? "" : ", ") + e.path().filename().string();
    }
  }
  throw UsageError(
      "--out '" + out.string() + "' " +
      (folder ? "is a folder that already holds " + held : std::string("already exists")) +
      ": an export does not replace " + (format == "hf" ? "an earlier export" : "a file") +
      " unasked; give another --out, or --force to replace it");
}

}  // namespace

namespace {

const std::string kSynopsis =
    "loom ckpt verify DIR | inspect DIR | export DIR --format safetensors|hf --out PATH "
    "[--tokenizer FILE] [--force] | "
    "import SRC --out DIR [--tokenizer FILE]";

// An external model read whole and checked against the model rules before anything is written.
int import_model(const po::variables_map& vm) {
  if (!vm.count("out")) throw UsageError("import needs --out DIR\nusage: " + kSynopsis);
  const fs::path root = vm["out"].as<std::string>();
  ckpt::check_import_target(root);  // before reading gigabytes
  const std::string src = vm["dir"].as<std::string>();
  ckpt::ExternalModel model = ckpt::read_external(src);  // all of it, before writing
  // The [model] keys it made, under the rules every later command applies to them: a
  // config.json those refuse (rope_theta 0, a negative norm eps) is refused here, before writing.
  try {
    model::read_model(
        external_model_config(model, src + " (its [model] keys, as imported)").section("model"));
  } catch (const ConfigError& e) {
    throw ConfigError(
        "'" + src +
        "' is refused before anything is written: the model it describes breaks a rule of "
        "Loom's [model]: " +
        e.what());
  }
  if (vm.count("tokenizer"))
    model.side_files["tokenizer.json"] =
        checked_tokenizer(vm["tokenizer"].as<std::string>(), model);
  ckpt::write_as_checkpoint(model, root);
  int64_t n = 0;
  for (const auto& [name, t] : model.tensors) n += static_cast<int64_t>(t.size());
  std::printf(
      "imported %s: %zu tensors, %lld parameters, into %s (step 0)\n[model] keys, also in %s:\n%s",
      model.source.c_str(), model.tensors.size(), (long long)n, (root / ckpt::step_name(0)).c_str(),
      (root / "model.toml").c_str(), model.model_toml.c_str());
  return kExitOk;
}

int verify_checkpoint(const fs::path& dir, const ckpt::Manifest& m) {
  const ckpt::CheckpointReader source(dir, m);
  ckpt::verify(dir, m, source.reader());
  std::printf(
      "%s: complete, %zu files checked (crc32c%s), %zu tensors covered\n", dir.c_str(),
      m.files.size() + 1,
      source.reader().via == "disk" ? "" : (", read through " + source.reader().via).c_str(),
      m.shapes.size());
  return kExitOk;
}

int inspect_checkpoint(const fs::path& dir, const ckpt::Manifest& m) {
  std::printf("checkpoint %s\nstep %lld (optimizer step %lld), precision %s\nlayout:", dir.c_str(),
              (long long)m.step, (long long)m.applied, m.precision.c_str());
  for (const auto& [k, v] : m.layout) std::printf(" %s=%lld", k.c_str(), (long long)v);
  std::printf("\n\n%-32s %-18s %12s\n", "tensor", "shape", "MiB");
  int64_t total = 0;
  for (const auto& [name, shape] : m.shapes) {
    int64_t n = 1;
    std::string s;
    for (int64_t d : shape) n *= d, s += (s.empty() ? "" : "x") + std::to_string(d);
    total += 4 * n;
    std::printf("%-32s %-18s %12.3f\n", name.c_str(), s.c_str(), 4.0 * n / 1048576.0);
  }
  std::printf("\n%zu tensors, %.2f MiB; files:\n", m.shapes.size(), total / 1048576.0);
  for (const auto& f : m.files)
    std::printf("  %s  %lld bytes  crc32c %08x  %zu tensors\n", f.name.c_str(), (long long)f.bytes,
                f.crc32c, f.parts.size());
  std::printf("  %s  %lld bytes  crc32c %08x\n\nconfig:\n%s", m.precision_state.name.c_str(),
              (long long)m.precision_state.bytes, m.precision_state.crc32c, m.config.c_str());
  return kExitOk;
}

// --format hf. With --force over an earlier export, the new one is written whole beside it first:
// a failure (a full disk) leaves the old export as it was. Then the old export's files go, so
// none outlives it beside the new ones; a user's own files in the folder stay.
int export_hf(const fs::path& dir, const ckpt::Manifest& m, const fs::path& out,
              const std::string& tokenizer, bool force) {
  const char* const written[] = {
      "config.json",    "model.safetensors",     "generation_config.json",
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
  std::error_code ec;
  if (force && fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      throw UsageError("--out '" + out.string() + "' is a file; --format hf writes a folder");
    const fs::path fresh = out.parent_path() / ("." + out.filename().string() + ".export-partial");
    fs::remove_all(fresh);
    try {
      ckpt::write_hf_folder(dir, m, fresh, tokenizer);
    } catch (...) {
      fs::remove_all(fresh, ec);
      throw;
    }
    for (const char* name : written) fs::remove(out / name);
    for (const auto& e : fs::directory_iterator(fresh))
      fs::rename(e.path(), out / e.path().filename());
    fs::remove(fresh);
  } else {
    ckpt::write_hf_folder(dir, m, out, tokenizer);
  }
  std::string files;
  for (const char* name : written)
    if (fs::exists(out / name)) files += (files.empty() ? "" : ", ") + std::string(name);
  std::printf("wrote %s: %s (step %lld), for transformers' from_pretrained\n", out.c_str(),
              files.c_str(), (long long)m.step);
  return kExitOk;
}

int export_checkpoint(const po::variables_map& vm, const fs::path& dir, const ckpt::Manifest& m) {
  const std::string format = vm["format"].as<std::string>();
  if (format != "safetensors" && format != "hf")
    throw UsageError("--format " + format + ": expected safetensors or hf");
  if (!vm.count("out")) throw UsageError("export needs --out PATH\nusage: " + kSynopsis);
  const bool force = vm["force"].as<bool>();
  const fs::path out = vm["out"].as<std::string>();
  if (!force) refuse_used_output(out, format);
  const ckpt::CheckpointReader source(dir, m);
  ckpt::verify(dir, m, source.reader());
  if (format == "safetensors") {
    export_safetensors(dir, m, source.reader(), out);
    return kExitOk;
  }
  return export_hf(dir, m, out, vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "",
                   force);
}

}  // namespace

int ckpt_cmd(const Args& args) {
  po::options_description opts("loom ckpt");
  opts.add_options()("action", po::value<std::string>()->required(),
                     "verify | inspect | export | import")(
      "dir", po::value<std::string>()->required(),
      "a step directory (or a checkpoint root: its latest); import: a Hugging Face folder or an "
      "llm.c model file")("format", po::value<std::string>()->default_value("safetensors"),
                          "export format: safetensors (Loom's names) or hf")(
      "out", po::value<std::string>(),
      "export: the file (safetensors) or folder (hf) to write; import: the checkpoint root")(
      "tokenizer", po::value<std::string>(),
      "the tokenizer.json to put beside the weights (export --format hf, and import: an llm.c file "
      "has none)")("force", po::bool_switch(), "export: replace what --out already holds");
  po::positional_options_description pos;
  pos.add("action", 1).add("dir", 1);
  po::variables_map vm;
  if (!parse(args, kSynopsis, opts, pos, vm)) return kExitOk;
  const std::string action = vm["action"].as<std::string>();
  if (action == "import") return import_model(vm);
  const fs::path dir = step_dir(vm["dir"].as<std::string>());
  if (action != "verify" && action != "inspect" && action != "export")
    throw UsageError("unknown action '" + action + "'\nusage: " + kSynopsis);
  const ckpt::Manifest m = ckpt::read_manifest(dir);
  if (action == "verify") return verify_checkpoint(dir, m);
  if (action == "inspect") return inspect_checkpoint(dir, m);
  return export_checkpoint(vm, dir, m);
}

}  // namespace loom::cli
