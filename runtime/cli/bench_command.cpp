// loom bench comm --op OP --min-bytes B --max-bytes B --nproc N [--comm gloo] [--config FILE]
// [--set k=v]
#include <cstdio>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "distributed/comm_bench.hpp"
#include "distributed/network.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/selection.hpp"

namespace loom::cli {

namespace {

// --op, the sizes, the iterations and the dtype, checked.
dist::CommBenchOptions bench_options(const po::variables_map& vm) {
  dist::CommBenchOptions o;
  o.op = vm["op"].as<std::string>();
  o.min_bytes = dist::parse_bytes(vm["min-bytes"].as<std::string>());
  o.max_bytes = dist::parse_bytes(vm["max-bytes"].as<std::string>());
  o.iters = vm["iters"].as<int>();
  o.warmup = vm["warmup"].as<int>();
  o.dtype = vm["dtype"].as<std::string>();
  if (o.dtype != "float" && o.dtype != "bfloat16")
    throw UsageError("--dtype must be float or bfloat16");
  dist::check_op(o.op);
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes)
    throw UsageError("need 1 <= --min-bytes <= --max-bytes");
  return o;
}

// The plugin and its options: --config's [plugins], then --set, then --comm, else gloo. Resolved
// here, so a third-party plugin's options are checked and an unknown name fails before any rank
// starts. gloo's signature check is a round trip of its own on the first 64 collectives: a
// benchmark of the collective leaves it out unless asked for.
config::Config bench_config(const po::variables_map& vm) {
  std::vector<std::string> overrides = sets(vm);
  if (vm.count("comm")) overrides.push_back("plugins.comm=" + vm["comm"].as<std::string>());
  auto load = [&] {
    config::Config c = vm.count("config")
                           ? config::Config::load(vm["config"].as<std::string>(), overrides)
                           : config::Config::parse("[plugins]\n", "--comm", overrides);
    c.validate(train::job_sections());
    return c;
  };
  config::Config cfg = load();
  if (plugins::read_plugins(cfg.section("plugins")).slot("comm").empty()) {
    overrides.push_back("plugins.comm=gloo");
    cfg = load();
  }
  const toml::table* gloo = cfg.plugin_table("gloo");
  if (plugins::read_plugins(cfg.section("plugins")).slot("comm") == "gloo" &&
      !(gloo && gloo->contains("check_every"))) {
    overrides.push_back("plugins.gloo.check_every=0");
    cfg = load();
  }
  return cfg;
}

}  // namespace

int bench(const Args& args) {
  po::options_description opts("loom bench comm");
  opts.add_options()("what", po::value<std::string>()->required(), "comm")(
      "op", po::value<std::string>()->default_value("all_reduce"),
      "all_reduce | all_gather | reduce_scatter | broadcast | all_to_all | sendrecv")(
      "min-bytes", po::value<std::string>()->default_value("8"), "smallest buffer (8, 1K, 64M)")(
      "max-bytes", po::value<std::string>()->default_value("256M"), "largest buffer")(
      "nproc", ranged<int>("nproc", 1, 4096)->default_value(2),
      "ranks to start when not under a launcher")(
      "comm", po::value<std::string>(),
      "comm plugin (default: the config's [plugins] comm, else gloo)")(
      "config", po::value<std::string>(),
      "a config whose [plugins] comm and [plugins.<name>] options to use")(
      "iters", ranged<int>("iters", 1, 1000000)->default_value(20), "timed iterations per size")(
      "warmup", ranged<int>("warmup", 0, 1000000)->default_value(5), "untimed iterations per size")(
      "dtype", po::value<std::string>()->default_value("float"), "float | bfloat16")(
      "interface", po::value<std::string>()->default_value(""),
      "network interface ([parallel] interface)");
  add_set_option(opts);
  add_node_options(opts);
  po::positional_options_description pos;
  pos.add("what", 1);
  po::variables_map vm;
  if (!parse(args,
             "loom bench comm [--op OP] [--min-bytes B] [--max-bytes B] [--nproc N] [--comm NAME] "
             "[--config FILE] [--set k=v]",
             opts, pos, vm))
    return kExitOk;
  if (vm["what"].as<std::string>() != "comm")
    throw UsageError("unknown benchmark '" + vm["what"].as<std::string>() + "': expected 'comm'");
  const dist::CommBenchOptions o = bench_options(vm);
  config::Config cfg = bench_config(vm);
  plugins::Registry reg(
      plugins::Registry::default_dirs(plugins::read_plugins(cfg.section("plugins")).path));
  plugins::set_plugin_source(&reg, &cfg);  // loom.plugins: a wrapper benchmarks as it trains
  plugins::Selection sel = plugins::resolve(cfg, reg);
  if (!sel.slot("comm")) throw UsageError("no comm plugin selected");
  std::optional<dist::RankEnv> env = dist::rank_from_environment();
  if (!env) return dist::spawn_node(node_spec(vm, vm["nproc"].as<int>()), self_invocation());
  const std::string comm = sel.slot("comm")->found.desc->name;
  const dist::InterfaceChoice nic =
      dist::network_interface(vm["interface"].as<std::string>(), *env, comm);
  if (env->rank == 0)
    std::printf("# interface: %s %s (from %s)\n", nic.nic.name.c_str(), nic.nic.address.c_str(),
                nic.source.c_str());
  if (env->rank == 0 && comm == "nccl")
    std::printf("# NCCL variables in effect: %s\n", dist::nccl_variables().c_str());
  loom_options comm_opts = sel.slot("comm")->options;
  dist::MeshShape mesh;
  mesh.dp = env->world;
  dist::CommWorld world(*env, mesh, sel.slot("comm")->found, &comm_opts, 120000);
  dist::run_comm_bench(world, o);
  world.world().barrier();
  return kExitOk;
}

}  // namespace loom::cli
