// loom data prepare --text FILE... --out DIR [--val-fraction F]
#include <cstdio>

#include "cli/parse.hpp"
#include "data/shards.hpp"

namespace loom::cli {

int data(const Args& args) {
  po::options_description opts("loom data prepare");
  opts.add_options()("action", po::value<std::string>()->required(), "prepare")(
      "text", po::value<std::vector<std::string>>()->multitoken()->required(),
      "text files to tokenise (bytes)")("out", po::value<std::string>()->required(),
                                        "output directory for the shards")(
      "val-fraction", po::value<double>()->default_value(0.05),
      "share of each file's tail held out for validation");
  po::positional_options_description pos;
  pos.add("action", 1);
  po::variables_map vm;
  if (!parse(args, "loom data prepare --text FILE... --out DIR [--val-fraction F]", opts, pos, vm))
    return kExitOk;
  if (vm["action"].as<std::string>() != "prepare")
    throw UsageError("unknown action '" + vm["action"].as<std::string>() + "': expected 'prepare'");
  std::vector<std::filesystem::path> inputs;
  for (const auto& t : vm["text"].as<std::vector<std::string>>()) inputs.emplace_back(t);
  data::PrepareReport r = data::prepare_text(inputs, vm["out"].as<std::string>(),
                                             vm["val-fraction"].as<double>());
  std::printf("wrote %zu shards to %s: %lld training and %lld validation tokens (bytes)\n",
              r.written.size(), vm["out"].as<std::string>().c_str(), (long long)r.train_tokens,
              (long long)r.val_tokens);
  return kExitOk;
}

}  // namespace loom::cli
