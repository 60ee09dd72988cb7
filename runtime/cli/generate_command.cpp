// loom generate SRC --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]
//   [--seed S] [--tokenizer FILE] [--ids] [--threads N]
// SRC: a Loom checkpoint (a step directory, a root with `latest`, or a run directory), a Hugging
// Face folder or an llm.c model file. One process, the CPU op table, a key/value cache; the text
// ends at the model's eos ids (generation_config.json), or the tokenizer's <|endoftext|>.
#include <cmath>
#include <cstdio>

#include "cli/model_source.hpp"
#include "cli/parse.hpp"
#include "train/sample.hpp"
#include "train/thread_policy.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

int generate(const Args& args) {
  po::options_description opts("loom generate");
  opts.add_options()("src", po::value<std::string>()->required(),
                     "a Loom checkpoint (a step directory, a checkpoint root or a run directory), "
                     "a Hugging Face folder or an llm.c model file")(
      "prompt", po::value<std::string>()->default_value("\n", "a line break"),
      "the text to continue (token ids with --ids)")(
      "max-tokens", ranged<int64_t>("max-tokens", 1, 1000000)->default_value(64),
      "tokens to generate at most")("temperature", po::value<double>()->default_value(1.0),
                                    "0 = greedy; 1, as the training-time samples")(
      "top-k", ranged<int64_t>("top-k", 0, 1 << 30)->default_value(8),
      "sample from the k likeliest tokens, 8 as the training-time samples ([train] sample_top_k); "
      "0 = all")("top-p", po::value<double>()->default_value(1.0),
                 "nucleus: the likeliest tokens holding this probability")(
      "seed", po::value<uint64_t>()->default_value(1), "sampling seed")(
      "tokenizer", po::value<std::string>(),
      "tokenizer.json (default: beside the weights or the run's data)")(
      "ids", po::bool_switch(), "the prompt and the output are token ids")(
      "threads", ranged<int64_t>("threads", 0, 4096)->default_value(0),
      "CPU threads; 0 = the cores this process may use, fewer while other processes keep some "
      "busy");
  po::positional_options_description pos;
  pos.add("src", 1);
  po::variables_map vm;
  const char* usage =
      "loom generate SRC --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] "
      "[--seed S] "
      "[--tokenizer FILE] [--ids] [--threads N]";
  if (!parse(args, usage, opts, pos, vm)) return kExitOk;
  const double temperature = vm["temperature"].as<double>(), top_p = vm["top-p"].as<double>();
  if (!(temperature >= 0) || !std::isfinite(temperature))  // NaN would pick the least likely token
    throw UsageError("--temperature must be a number >= 0 (0 = greedy)");
  if (!(top_p > 0 && top_p <= 1)) throw UsageError("--top-p must be in (0, 1]");
  const ModelSource source = open_model_source(
      vm["src"].as<std::string>(), vm.count("tokenizer") ? vm["tokenizer"].as<std::string>() : "");
  const bool ids = vm["ids"].as<bool>();
  const std::unique_ptr<tok::Tokenizer> tokenizer = tokenizer_for(source, ids);
  const auto loaded = load_model(source, source.model.seq_len);
  // Like training: all the cores while they are free, fewer while other processes take some.
  const int64_t asked = vm["threads"].as<int64_t>();
  const int threads = inference_threads(asked);
  // A token is a few ms: look after every one, and at most every 0.1 s (the policy's window).
  train::ThreadPolicy policy("cpu", threads, asked == 0, false, 1);
  train::SampleOptions o{vm["max-tokens"].as<int64_t>(),     temperature,
                         vm["top-k"].as<int64_t>(),          top_p,
                         vm["seed"].as<uint64_t>(),          stop_ids(source, tokenizer.get()),
                         [&policy] { policy.after_step(); }, true};
  const std::string prompt = vm["prompt"].as<std::string>();
  if (ids) {
    std::string line;
    for (int32_t id :
         train::generate_ids(*loaded->model, parse_token_ids(prompt, "--ids: the prompt"), o))
      line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
    return kExitOk;
  }
  std::printf(
      "%s%s\n", prompt.c_str(),
      train::printable(train::generate(*loaded->model, tokenizer.get(), prompt, o)).c_str());
  return kExitOk;
}

}  // namespace loom::cli
