#include "ckpt/init_from.hpp"

#include <cstdio>

#include "ckpt/convert.hpp"
#include "ckpt/format.hpp"
#include "ckpt/reader.hpp"
#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace loom::ckpt {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string o;
  for (int64_t d : s) o += (o.empty() ? "" : "x") + std::to_string(d);
  return o;
}

// The embedding and head are padded to a multiple of 64 x tp rows: rows past the real
// vocabulary are zero wherever they come from, so a different padding is not a different model.
bool same_but_padding(const Param& p, const std::vector<int64_t>& have) {
  return (p.name == "wte" || p.name == "lm_head.w") && have.size() == 2 &&
         p.global_shape.size() == 2 && have[1] == p.global_shape[1];
}

// Every parameter this rank holds from the source's global tensor of the same name.
void fill_params(const fs::path& src, const ExternalModel& w, ParamStore& params) {
  const std::string hint = "\nthe source's model is:\n" + w.model_toml.substr(0, 2000);
  for (Param& p : params.all()) {
    auto t = w.tensors.find(p.name);
    if (t == w.tensors.end())
      throw ConfigError("[model] init_from = \"" + src.string() + "\": it has no tensor " + p.name +
                        " for this model" + hint);
    const std::vector<int64_t>& have = w.shapes.at(p.name);
    const bool padded = have != p.global_shape && same_but_padding(p, have);
    if (have != p.global_shape && !padded)
      throw ConfigError("[model] init_from = \"" + src.string() + "\": tensor " + p.name + " is " +
                        shape_text(have) + " there and " + shape_text(p.global_shape) +
                        " in this model" + hint);
    float* dst = p.value.f32();
    const int64_t cols = p.global_shape.size() == 2 ? p.global_shape[1] : 1, rows_have = have[0];
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      const int64_t g = global_index(i, p.local_shape, p.global_shape, p.slice);
      dst[i] = !padded || g / cols < rows_have ? t->second[g] : 0.f;
    }
  }
}

}  // namespace

void init_from(const fs::path& src, ParamStore& params, bool verbose) {
  ExternalModel w;
  if (fs::exists(src / "manifest.json") || fs::exists(src / "latest") ||
      fs::exists(src / "metrics.jsonl")) {
    const fs::path dir = find_checkpoint(src);
    const Manifest m = read_manifest(dir);
    const CheckpointReader source(dir, m);
    verify(dir, m, source.reader());
    std::map<std::string, std::vector<char>> files;
    for (const Param& p : params.all())
      if (m.shapes.count(p.name))
        w.tensors[p.name] = assemble(dir, m, p.name, files, source.reader()),
        w.shapes[p.name] = m.shapes.at(p.name);
    w.source = "Loom checkpoint " + dir.string() + " (step " + std::to_string(m.step) + ")";
    w.model_toml = m.config;
  } else {
    w = read_external(src);
    w.source += " weights from " + src.string();
  }
  init_from(src, w, params, verbose);
}

void init_from(const fs::path& src, const ExternalModel& weights, ParamStore& params,
               bool verbose) {
  fill_params(src, weights, params);
  if (verbose)
    std::printf("init_from: %s, %zu tensors\n", weights.source.c_str(), params.all().size());
}

}  // namespace loom::ckpt
