// loom model info PRESET|FILE: what a model is before anyone trains it: its shape, parameters
// (all, non-embedding, used per token), training FLOPs per token, and the bytes of model state
// each rank holds under each ZeRO stage.
#include <cstdio>
#include <iostream>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "config/config.hpp"
#include "config/schema.hpp"
#include "config/section.hpp"
#include "core/json.hpp"
#include "core/nearest.hpp"
#include "model/model.hpp"

namespace loom::cli {

namespace {

// 8030261248 -> "8,030,261,248"
std::string grouped(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return b;
}

// Bytes per parameter each rank holds for params, gradients and Adam's two moments under ZeRO
// stage 0-3 on n data-parallel ranks (Rajbhandari et al. 2020). fp32 training holds 4 + 4 + 8;
// mixed precision holds 2 + 2 + K = 12 (fp32 master, m, v): 16 Psi, 4 + 12/N, 2 + 14/N, 16/N.
struct StateBytes {
  double fp32, mixed;
};
StateBytes per_param(int stage, double n) {
  switch (stage) {
    case 0:
      return {16, 16};
    case 1:
      return {8 + 8 / n, 4 + 12 / n};
    case 2:
      return {4 + 12 / n, 2 + 14 / n};
    default:
      return {16 / n, 16 / n};
  }
}

config::Config model_config(const std::string& what, const std::vector<std::string>& set_flags) {
  for (const auto& name : config::model_preset_names())
    if (!name.empty() && name == what)
      return config::Config::parse("[model]\npreset = \"" + what + "\"\n", "<preset " + what + ">",
                                   set_flags);
  if (what.find('/') == std::string::npos && what.find(".toml") == std::string::npos) {
    std::vector<std::string> names = config::model_preset_names();
    names.erase(names.begin());
    throw UsageError("'" + what + "' is neither a preset nor a config file" +
                     did_you_mean(what, names));
  }
  return config::Config::load(what, set_flags);
}

void print_text(const std::string& name, const model::Config& m, int64_t dp) {
  std::printf("%s: %s\n", name.c_str(), m.describe().c_str());
  if (m.params() >= 100000000)
    std::printf("  params            %17s  (%.3gB)\n", grouped(m.params()).c_str(),
                m.params() / 1e9);
  else
    std::printf("  params            %17s  (%.3gM)\n", grouped(m.params()).c_str(),
                m.params() / 1e6);
  std::printf("  non-embedding     %17s  (PaLM's N: without the token and position tables)\n",
              grouped(m.non_embedding_params()).c_str());
  if (m.moe.experts > 0)
    std::printf("  active per token  %17s  (top %lld of %lld experts)\n",
                grouped(m.active_params()).c_str(), (long long)m.moe.top_k,
                (long long)m.moe.experts);
  std::printf("  FLOPs/token       %17.4g  (6 N + 12 L H Q T at T = %lld; forward + backward)\n",
              m.flops_per_token(), (long long)m.seq_len);
  std::printf("  model state per rank, dp = %lld (params + grads + Adam m, v):\n", (long long)dp);
  std::printf("    %-6s %22s %28s\n", "", "fp32 (4+4+8 B/param)", "mixed (2+2+12 B/param)");
  const char* stages[] = {"ddp", "zero1", "zero2", "zero3"};
  for (int s = 0; s < 4; ++s) {
    StateBytes b = per_param(s, static_cast<double>(dp));
    std::printf("    %-6s %6.2f B/param %12s %8.2f B/param %12s\n", stages[s], b.fp32,
                gib(b.fp32 * m.params()).c_str(), b.mixed, gib(b.mixed * m.params()).c_str());
  }
}

void print_json(const std::string& name, const model::Config& m, int64_t dp) {
  std::cout << "{\"model\": " << json_quote(name) << ", \"describe\": " << json_quote(m.describe())
            << ", \"params\": " << m.params()
            << ", \"non_embedding_params\": " << m.non_embedding_params()
            << ", \"active_params\": " << m.active_params()
            << ", \"flops_per_token\": " << m.flops_per_token() << ", \"dp\": " << dp
            << ", \"state_bytes_per_rank\": {";
  const char* stages[] = {"ddp", "zero1", "zero2", "zero3"};
  for (int s = 0; s < 4; ++s) {
    StateBytes b = per_param(s, static_cast<double>(dp));
    std::cout << (s ? ", " : "") << json_quote(stages[s]) << ": {\"fp32\": " << b.fp32 * m.params()
              << ", \"mixed\": " << b.mixed * m.params() << "}";
  }
  std::cout << "}}\n";
}

}  // namespace

int model(const Args& args) {
  po::options_description opts("loom model");
  add_set_option(opts);
  opts.add_options()("dp", po::value<int64_t>()->default_value(8),
                     "data-parallel ranks for the ZeRO rows")("json", "machine-readable output")(
      "words", po::value<std::vector<std::string>>(), "info PRESET|FILE");
  po::positional_options_description pos;
  pos.add("words", -1);
  po::variables_map vm;
  const char* usage = "loom model info PRESET|FILE [--set model.key=value]... [--dp N] [--json]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  auto words =
      vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (words.size() != 2 || words[0] != "info") throw UsageError(std::string("usage: ") + usage);
  const int64_t dp = vm["dp"].as<int64_t>();
  if (dp < 1) throw UsageError("--dp " + std::to_string(dp) + ": needs at least 1 rank");
  config::Config cfg = model_config(words[1], sets(vm));
  cfg.validate(train::job_sections());
  const model::Config m = model::read_model(cfg.section("model"));
  if (vm.count("json"))
    print_json(words[1], m, dp);
  else
    print_text(words[1], m, dp);
  return kExitOk;
}

}  // namespace loom::cli
