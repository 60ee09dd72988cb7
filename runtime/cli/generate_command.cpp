// loom generate SRC --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]
//   [--seed S] [--tokenizer FILE] [--ids]
// SRC: a Loom checkpoint (a step directory or a root with `latest`), a Hugging Face folder or an
// llm.c model file. One process, the CPU op table, a key/value cache.
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "ckpt/convert.hpp"
#include "ckpt/format.hpp"
#include "ckpt/init_from.hpp"
#include "cli/parse.hpp"
#include "config/config.hpp"
#include "model/model.hpp"
#include "ops/ops.hpp"
#include "parallel/layer_api.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/sample.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

// The model a source holds, as a validated config (its [model] section), and where a tokenizer
// for it would be. An external source's weights are read here, once, into `external`.
config::Config source_config(const fs::path& src, fs::path& tokenizer, std::optional<ckpt::ExternalModel>& external) {
  const bool loom = fs::exists(src / "manifest.json") || fs::exists(src / "latest") || fs::exists(src / "metrics.jsonl");
  if (!loom) {
    external = ckpt::read_external(src);
    if (fs::exists(src / "tokenizer.json")) tokenizer = src / "tokenizer.json";
    config::Config cfg = config::Config::parse("[model]\n" + external->model_toml, src.string());
    cfg.validate_runtime();
    return cfg;
  }
  const fs::path dir = ckpt::find_checkpoint(src);
  config::Config cfg = config::Config::parse(ckpt::read_manifest(dir).config, (dir / "manifest.json").string());
  cfg.validate_runtime();
  tokenizer = tok::run_tokenizer_path(cfg);
  return cfg;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  int64_t id;
  while (in >> id) ids.push_back(static_cast<int32_t>(id));
  if (!in.eof()) throw UsageError("--ids: the prompt must be token ids separated by spaces");
  return ids;
}

}  // namespace

int generate(const Args& args) {
  po::options_description opts("loom generate");
  opts.add_options()("src", po::value<std::string>()->required(),
                     "a Loom checkpoint (a step directory, a checkpoint root or a run directory), a Hugging Face folder or an llm.c model file")(
      "prompt", po::value<std::string>()->default_value("\n"), "the text to continue (token ids with --ids)")(
      "max-tokens", ranged<int64_t>("max-tokens", 1, 1000000)->default_value(64), "tokens to generate at most")(
      "temperature", po::value<double>()->default_value(1.0), "0 = greedy")(
      "top-k", ranged<int64_t>("top-k", 0, 1 << 30)->default_value(0), "sample from the k likeliest tokens; 0 = all")(
      "top-p", po::value<double>()->default_value(1.0), "nucleus: the likeliest tokens holding this probability")(
      "seed", po::value<uint64_t>()->default_value(1), "sampling seed")(
      "tokenizer", po::value<std::string>(), "tokenizer.json (default: beside the weights or the run's data)")(
      "ids", po::bool_switch(), "the prompt and the output are token ids");
  po::positional_options_description pos;
  pos.add("src", 1);
  po::variables_map vm;
  const char* usage =
      "loom generate SRC --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] "
      "[--tokenizer FILE] [--ids]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  const double temperature = vm["temperature"].as<double>(), top_p = vm["top-p"].as<double>();
  if (!(temperature >= 0) || !std::isfinite(temperature))  // NaN would pick the least likely token
    throw UsageError("--temperature must be a number >= 0 (0 = greedy)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  const fs::path src = vm["src"].as<std::string>();
  fs::path tokenizer_path;
  std::optional<ckpt::ExternalModel> external;
  config::Config cfg = source_config(src, tokenizer_path, external);
  if (vm.count("tokenizer")) tokenizer_path = vm["tokenizer"].as<std::string>();
  const model::Config c = model::from_config(cfg);
  const bool ids = vm["ids"].as<bool>();
  std::unique_ptr<tok::Tokenizer> tokenizer;
  if (!ids && !tokenizer_path.empty()) tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_json_file(tokenizer_path));
  if (!ids && !tokenizer && c.vocab_size != 256)
    throw UsageError("the model's vocabulary has " + std::to_string(c.vocab_size) +
                     " tokens and no tokenizer was found: pass --tokenizer tokenizer.json, or --ids");
  LayerApi api(ops::cpu());
  ParamStore params;
  std::unique_ptr<model::Model> built = model::build(c, api, params, c.seq_len);
  model::Model& model = *built;
  // A prompt's tokens decode in pieces: MoE routes them dropless, as training samples do, so a
  // piece's size cannot drop a token.
  for (auto& [name, routed] : model.routed_layers()) routed->use_capacity(false);
  params.allocate(1);
  if (external)
    ckpt::init_from(src, *external, params, false);
  else
    ckpt::init_from(src, params, false);
  train::SampleOptions o{vm["max-tokens"].as<int64_t>(), temperature, vm["top-k"].as<int64_t>(), top_p,
                         vm["seed"].as<uint64_t>()};
  if (tokenizer) o.stop = tokenizer->special("<|endoftext|>");
  const std::string prompt = vm["prompt"].as<std::string>();
  if (ids) {
    std::string line;
    for (int32_t id : train::generate_ids(model, parse_ids(prompt), o)) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
    return kExitOk;
  }
  std::printf("%s%s\n", prompt.c_str(), train::printable(train::generate(model, tokenizer.get(), prompt, o)).c_str());
  return kExitOk;
}

}  // namespace loom::cli
