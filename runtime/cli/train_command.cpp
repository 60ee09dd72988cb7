// loom train FILE [--set k=v]... [--run-dir DIR]
#include <cstdio>

#include "cli/parse.hpp"
#include "plugins/selection.hpp"
#include "train/trainer.hpp"

namespace loom::cli {

int train(const Args& args) {
  po::options_description opts("loom train");
  add_set_option(opts);
  opts.add_options()("run-dir", po::value<std::string>(), "where metrics and outputs go")(
      "file", po::value<std::string>()->required(), "config file (TOML)");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(args, "loom train FILE [--set section.key=value]... [--run-dir DIR]", opts, pos, vm))
    return kExitOk;

  config::Config cfg = config::Config::load(vm["file"].as<std::string>(), sets(vm));
  cfg.validate_runtime();
  plugins::Registry reg(plugins::Registry::default_dirs(cfg.str_list("plugins.path")));
  plugins::Selection sel = plugins::resolve(cfg, reg);
  std::filesystem::path run_dir =
      vm.count("run-dir") ? std::filesystem::path(vm["run-dir"].as<std::string>())
                          : train::default_run_dir(cfg);
  train::TrainSummary s = train::train(cfg, reg, sel, run_dir);
  std::printf("done: %lld steps, train loss %.4f -> %.4f", (long long)s.steps, s.first_loss,
              s.final_loss);
  if (s.final_val_loss >= 0) std::printf(", val loss %.4f -> %.4f", s.first_val_loss, s.final_val_loss);
  std::printf(", %.0f tokens/s, MFU %.1f%%; metrics in %s\n", s.tokens_per_s, s.mfu * 100,
              (run_dir / "metrics.jsonl").c_str());
  return kExitOk;
}

}  // namespace loom::cli
