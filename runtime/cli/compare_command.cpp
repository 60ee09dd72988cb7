// loom compare A.toml B.toml [--rounds N] [--seeds K] [--steps S] [--set k=v]... [--out DIR]
// [--json] loom compare --from-runs A1[,A2...] B1[,B2...] [--rtol R] [--out DIR] [--json]
//
// Trains both configs (in interleaved rounds A B B A ..., or both at once on disjoint cores with
// --together), then reports what they cost (throughput, MFU, memory, comm), whether they train
// the same model, and, over several rounds, whether a speed difference is real or noise and
// whether B's loss lies within A's seed-to-seed spread (report/noise.hpp, docs/stability.md).
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "core/files.hpp"
#include "core/json.hpp"
#include "loader/plugin_settings.hpp"
#include "plan/calibration.hpp"
#include "plan/from_config.hpp"
#include "plan/sources.hpp"
#include "report/compare.hpp"
#include "report/noise.hpp"
#include "report/svg.hpp"
#include "train/settings.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

// Starts `argv` as a child with this process's stdout and stderr, on the CPUs in `cpus` when
// it is not empty; returns its pid.
pid_t start_child(const std::vector<std::string>& argv, const std::vector<int>& cpus = {}) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) throw RuntimeError("fork failed");
  if (pid == 0) {
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) CPU_SET(c, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The sections that decide what is trained, how and where: the settings the notes compare
// ("B differs from A in section.key: A -> B").
const std::vector<std::string> kDecisiveSections = {"run",      "model",   "data",  "train",
                                                    "parallel", "plugins", "faults"};

struct Side {
  std::string name, file;
  std::vector<fs::path> dirs;               // one run per round
  std::vector<std::string> overrides = {};  // --set-a / --set-b: this side's alone
};

struct Plan {
  int64_t rounds = 1, seeds = 1, seed0 = 0;
  bool together = false;
  std::vector<std::string> overrides;
};

std::vector<std::string> train_argv(const Side& s, const fs::path& dir, const Plan& p,
                                    int64_t round, int threads) {
  std::vector<std::string> argv = {self_invocation()[0], "train", s.file, "--run-dir",
                                   dir.string()};
  for (const auto& o : p.overrides) argv.insert(argv.end(), {"--set", o});
  for (const auto& o : s.overrides) argv.insert(argv.end(), {"--set", o});
  if (p.seeds > 1)
    argv.insert(argv.end(), {"--set", "run.seed=" + std::to_string(p.seed0 + round % p.seeds)});
  if (threads > 0) argv.insert(argv.end(), {"--set", "run.threads=" + std::to_string(threads)});
  return argv;
}

// Round r runs A then B when r is even, B then A when odd (A B B A A B ...), so neither config
// always runs first on a machine whose load drifts; --together runs both at once, each on half of
// the cores.
void train_rounds(Side& a, Side& b, const fs::path& out, const Plan& p) {
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  // The sides' run directories are this comparison's own: a comparison run again trains afresh
  // (a fresh run is refused where an earlier one left its metrics).
  for (const Side* s : {&a, &b}) fs::remove_all(out / s->name);
  for (int64_t r = 0; r < p.rounds; ++r) {
    const std::string sub = p.rounds > 1 ? "round-" + std::to_string(r + 1) : "";
    a.dirs.push_back(sub.empty() ? out / a.name : out / a.name / sub);
    b.dirs.push_back(sub.empty() ? out / b.name : out / b.name / sub);
    if (p.together) {
      std::vector<int> first, second;
      for (int c = 0; c < cores; ++c) (c < cores / 2 ? first : second).push_back(c);
      std::printf("== round %lld: %s and %s together on cores 0-%d and %d-%d\n", (long long)r + 1,
                  a.name.c_str(), b.name.c_str(), cores / 2 - 1, cores / 2, cores - 1);
      pid_t pa =
          start_child(train_argv(a, a.dirs.back(), p, r, static_cast<int>(first.size())), first);
      pid_t pb =
          start_child(train_argv(b, b.dirs.back(), p, r, static_cast<int>(second.size())), second);
      const int ra = wait_child(pa), rb = wait_child(pb);
      if (ra != 0 || rb != 0)
        throw RuntimeError("training round " + std::to_string(r + 1) + " failed: " + a.name +
                           " exit " + std::to_string(ra) + ", " + b.name + " exit " +
                           std::to_string(rb));
      continue;
    }
    for (Side* s : r % 2 == 0 ? std::vector<Side*>{&a, &b} : std::vector<Side*>{&b, &a}) {
      std::string sets;
      for (const auto& o : s->overrides) sets += " --set " + o;
      std::printf(
          "== %s%s: loom train %s%s\n", s->name.c_str(),
          p.rounds > 1
              ? (", round " + std::to_string(r + 1) + "/" + std::to_string(p.rounds)).c_str()
              : "",
          s->file.c_str(), sets.c_str());
      const int rc = wait_child(start_child(train_argv(*s, s->dirs.back(), p, r, 0)));
      if (rc != 0)
        throw RuntimeError("training " + s->name + " (" + s->file + ") failed with exit code " +
                           std::to_string(rc));
    }
  }
}

// "runs/a/" names "a", like "runs/a".
fs::path run_dir(const std::string& text) {
  fs::path d = fs::path(text).lexically_normal();
  return d.has_filename() ? d : d.parent_path();
}

std::vector<fs::path> split_dirs(const std::string& list) {
  std::vector<fs::path> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(run_dir(item));
  return out;
}

// What several rounds say: step-time spreads, the B/A interval and verdict, and with several
// seeds (or runs) per side, the loss against seed noise.
struct Noise {
  report::Spread step_a, step_b, tps_a, tps_b;
  report::RatioEstimate ratio;
  report::SpeedVerdict speed;
  bool has_loss = false;
  report::LossVerdict loss;
  std::vector<report::RoundTimes> rounds;
  std::string text;
};

Noise assess(const std::string& name_a, const std::vector<report::Run>& a,
             const std::string& name_b, const std::vector<report::Run>& b, size_t warmup,
             int64_t seeds, double min_effect, double effect) {
  Noise n;
  std::vector<double> all_a, all_b, tps_a, tps_b, med_a, med_b;
  n.rounds = {{name_a, "#1f77b4", {}}, {name_b, "#d62728", {}}};
  for (auto [runs, all, tps, med, k] :
       {std::tuple{&a, &all_a, &tps_a, &med_a, 0}, {&b, &all_b, &tps_b, &med_b, 1}})
    for (const auto& r : *runs) {
      if (r.steps.size() <= warmup)
        throw UsageError("--warmup " + std::to_string(warmup) + " leaves none of the " +
                         std::to_string(r.steps.size()) + " steps of " + r.dir.string() +
                         " to time: lower it, or train more --steps");
      auto steps = report::steady_values(r, "step_ms", warmup),
           tok = report::steady_values(r, "tokens_per_s", warmup);
      all->insert(all->end(), steps.begin(), steps.end());
      tps->insert(tps->end(), tok.begin(), tok.end());
      med->push_back(report::spread(steps).median);
      n.rounds[k].rounds.push_back(steps);
    }
  n.step_a = report::spread(all_a), n.step_b = report::spread(all_b);
  n.tps_a = report::spread(tps_a), n.tps_b = report::spread(tps_b);
  n.ratio = report::paired_ratio(med_a, med_b);
  n.speed = report::speed_verdict(n.ratio, min_effect, effect);
  char line[256];
  std::snprintf(line, sizeof line, "%-30s %14s %14s\n", "over all rounds", name_a.c_str(),
                name_b.c_str());
  n.text = line;
  std::snprintf(line, sizeof line, "%-30s %6.1f [%5.1f] %6.1f [%5.1f]\n", "step ms, median [IQR]",
                n.step_a.median, n.step_a.q3 - n.step_a.q1, n.step_b.median,
                n.step_b.q3 - n.step_b.q1);
  n.text += line;
  std::snprintf(line, sizeof line, "%-30s %6.0f [%5.0f] %6.0f [%5.0f]\n", "tokens/s, median [IQR]",
                n.tps_a.median, n.tps_a.q3 - n.tps_a.q1, n.tps_b.median, n.tps_b.q3 - n.tps_b.q1);
  n.text += line + n.speed.text + "\n";
  // One sample per seed: the first `seeds` rounds (later rounds repeat a seed to the bit). Runs
  // given with --from-runs count one each (seeds = 0); rounds of one seed say nothing about loss.
  const size_t samples = std::min(a.size(), b.size()),
               per_side = seeds > 0 ? std::min<size_t>(seeds, samples) : samples;
  if (per_side >= 2) {
    std::vector<double> fa, fb, ca, cb;
    for (size_t i = 0; i < per_side; ++i) {
      fa.push_back(a[i].last("loss")), fb.push_back(b[i].last("loss"));
      ca.push_back(a[i].mean("loss")), cb.push_back(b[i].mean("loss"));
    }
    n.has_loss = true;
    n.loss = report::loss_verdict(fa, fb, ca, cb);
    n.text += n.loss.text;
  }
  return n;
}

std::string noise_html(const Noise& n, bool together) {
  using report::html_escape;
  std::string out = "<h2>Rounds</h2>\n<p id=\"speed-verdict\" class=\"" +
                    std::string(n.speed.sign ? "bad" : "good") + "\">" + html_escape(n.speed.text) +
                    "</p>\n";
  if (n.has_loss) {
    out += "<p id=\"loss-verdict\" class=\"" +
           std::string(n.loss.final_within && n.loss.curve_within ? "good" : "bad") + "\">";
    std::stringstream lines(n.loss.text);
    for (std::string l; std::getline(lines, l);) out += html_escape(l) + "<br>";
    out += "</p>\n";
  }
  out += "<pre style=\"white-space:pre-wrap\">" + html_escape(n.text) + "</pre>\n";
  out += report::svg_rounds(n.rounds,
                            together ? "A and B together on disjoint cores" : "A B B A order");
  return out +
         "<p class=\"note\">The table and curves below are round 1's; the verdicts above pool "
         "every round.</p>\n";
}

std::string noise_json(const Noise& n) {
  std::ostringstream o;
  o.precision(9);
  auto spread = [&](const report::Spread& s) {
    std::ostringstream j;
    j.precision(9);
    j << "{\"median\": " << s.median << ", \"q1\": " << s.q1 << ", \"q3\": " << s.q3
      << ", \"n\": " << s.n << "}";
    return j.str();
  };
  o << "\"step_ms\": {\"A\": " << spread(n.step_a) << ", \"B\": " << spread(n.step_b)
    << "}, \"tokens_per_s\": {\"A\": " << spread(n.tps_a) << ", \"B\": " << spread(n.tps_b)
    << "}, \"step_time_ratio\": {\"estimate\": " << json_number(n.ratio.ratio) << ", \"ci95\": ["
    << json_number(n.ratio.lo) << ", " << json_number(n.ratio.hi)
    << "], \"sd_log\": " << json_number(n.ratio.sd_log) << ", \"rounds\": " << n.ratio.rounds
    << "}, \"speed_verdict\": {\"sign\": " << n.speed.sign
    << ", \"text\": " << json_quote(n.speed.text) << "}, \"rounds_step_ms\": {";
  for (size_t k = 0; k < n.rounds.size(); ++k) {
    o << (k ? ", " : "") << json_quote(k == 0 ? "A" : "B") << ": [";
    for (size_t r = 0; r < n.rounds[k].rounds.size(); ++r) {
      o << (r ? ", " : "") << "[";
      for (size_t i = 0; i < n.rounds[k].rounds[r].size(); ++i)
        o << (i ? ", " : "") << n.rounds[k].rounds[r][i];
      o << "]";
    }
    o << "]";
  }
  o << "}";
  if (n.has_loss)
    o << ", \"loss_verdict\": {\"final_within\": " << (n.loss.final_within ? "true" : "false")
      << ", \"curve_within\": " << (n.loss.curve_within ? "true" : "false")
      << ", \"text\": " << json_quote(n.loss.text) << "}";
  return o.str();
}

}  // namespace

// loom plan's prediction for each side, made before any run (a bad cluster file or a layout the
// planner refuses fails at once), and put beside the measured rows afterwards.
struct Predictions {
  std::string note;
  plan::Estimate a, b;
};

Predictions predict_both(const std::string& cluster_file, const train::JobSettings& ca,
                         const train::JobSettings& cb) {
  const plan::Cluster cluster = plan::load_cluster(cluster_file);
  Predictions p{"", plan::predict(cluster, ca),
                plan::predict(cluster, cb)};  // each side's plugins with its options
  p.note = "predictions: loom plan with " + cluster_file + " ('" + cluster.name + "'), layouts " +
           p.a.layout.name() + " and " + p.b.layout.name();
  return p;
}

void add_predictions(report::Comparison& c, const Predictions& p) {
  auto at = c.table.begin();
  while (at != c.table.end() && at->what != "step time (ms)") ++at;
  if (at != c.table.end()) ++at;
  at = c.table.insert(at, {{"  predicted (loom plan)", p.a.step_ms, p.b.step_ms, "%.1f", false},
                           {"  predicted peak memory (MiB)", p.a.memory.total() / 1048576.0,
                            p.b.memory.total() / 1048576.0, "%.0f", false}});
  while (at != c.table.end() && at->what != "exposed comm share") ++at;
  if (at != c.table.end())
    c.table.insert(at + 1, {"  predicted (loom plan)", 100 * p.a.exposed_comm_ms / p.a.step_ms,
                            100 * p.b.exposed_comm_ms / p.b.step_ms, "%.1f%%", false});
  c.notes.push_back(p.note);
  for (const plan::Estimate* e : {&p.a, &p.b})
    if (!e->extrapolated.empty())
      c.notes.push_back("the prediction for " + e->layout.name() +
                        " is extrapolated: " + e->extrapolated);
}

namespace {

const std::string kSynopsis =
    "loom compare A.toml B.toml [--rounds N] [--seeds K] [--together] [--steps N] [--set k=v]... "
    "[--rtol R] [--out DIR] "
    "[--json]\n       loom compare CONFIG --set-a k=v... --set-b k=v... [the same options]\n       "
    "loom compare --from-runs A1[,A2...] B1[,B2...] [--rtol R] [--out DIR] [--json]";

void add_compare_options(po::options_description& opts) {
  add_set_option(opts);
  opts.add_options()("configs", po::value<std::vector<std::string>>()->multitoken(),
                     "A.toml B.toml")("set-a", po::value<std::vector<std::string>>()->composing(),
                                      "override a key for side A only (repeatable)")(
      "set-b", po::value<std::vector<std::string>>()->composing(),
      "override a key for side B only (repeatable)")(
      "from-runs", po::value<std::vector<std::string>>()->multitoken(),
      "compare finished runs: DIR_A DIR_B, or A1,A2,... B1,B2,... (paired rounds)")(
      "steps", po::value<int64_t>(),
      "train each config this many steps (default: its own train.steps)")(
      "rounds", ranged<int64_t>("rounds", 1, 1000)->default_value(1),
      "runs of each config, interleaved A B B A ...")(
      "seeds", ranged<int64_t>("seeds", 1, 1000)->default_value(1),
      "seeds per config (round r uses seed run.seed + r mod K)")(
      "together",
      "run A and B at once, each on half of the cores (instead of one after the other)")(
      "warmup", ranged<int64_t>("warmup", 0, 1000000000)->default_value(2),
      "steps of each run left out of the timings")(
      "effect", ranged<double>("effect", 0.0001, 10)->default_value(0.02, "0.02"),
      "the difference to say how many rounds would resolve")(
      "min-effect", ranged<double>("min-effect", 0, 10)->default_value(0.01, "0.01"),
      "smaller speed differences are not called real")(
      "rtol", ranged<double>("rtol", 0, 1000)->default_value(1e-4, "1e-4"),
      "relative tolerance for loss and grad norm")(
      "json", "print everything as JSON (also written to OUT/compare.json)")(
      "out", po::value<std::string>(),
      "directory for the runs and report.html (default runs/compare-A-vs-B)")(
      "name-a", po::value<std::string>(),
      "side A's name in the report (default: its config's name, or its --set-a settings)")(
      "name-b", po::value<std::string>(),
      "side B's name in the report (default: its config's name, or its --set-b settings)")(
      "cluster", po::value<std::string>(),
      "print loom plan's predicted step time and memory beside the measured ones");
}

struct Settings {
  double rtol = 0;
  Plan plan;
  int64_t warmup = 0;
};

Settings read_settings(const po::variables_map& vm) {
  Settings s;
  s.rtol = vm["rtol"].as<double>();
  s.plan.seeds = vm["seeds"].as<int64_t>();
  s.plan.rounds = std::max(vm["rounds"].as<int64_t>(), s.plan.seeds);
  s.plan.together = vm.count("together") > 0;
  s.warmup = vm["warmup"].as<int64_t>();
  if (vm.count("steps") && s.warmup >= vm["steps"].as<int64_t>())
    throw UsageError("--warmup " + std::to_string(s.warmup) + " leaves none of the " +
                     std::to_string(vm["steps"].as<int64_t>()) +
                     " steps to time: lower it, or train more --steps");
  return s;
}

// The two sides, where their runs go (or are), what differs between their configs, and loom
// plan's predictions when --cluster asks for them.
struct Sides {
  Side a{"A", "", {}}, b{"B", "", {}};
  std::optional<Predictions> predictions;
  fs::path out;
  std::vector<std::string> notes;
};

// A side's name from its own overrides: "parallel.tp=2", "plugins.data=zero2" give
// "tp=2,data=zero2", or "" when it has none. Only characters a directory name takes.
std::string name_of_overrides(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides) {
    const size_t eq = o.find('='), dot = o.rfind('.', eq);
    std::string part = dot == std::string::npos ? o : o.substr(dot + 1);
    for (char& ch : part)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '=' && ch != '.' && ch != '-' &&
          ch != '_')
        ch = '_';
    out += (out.empty() ? "" : ",") + part;
  }
  return out.size() > 60 ? "" : out;
}

// The sides' names: --name-a and --name-b; else each config's name, or where both sides are the
// same config, the settings that make them differ (--set-a parallel.dp=2 names A "dp=2"). Two sides
// may still share a name ("a.toml" in two folders); the report needs them apart.
void name_sides(Sides& s, const po::variables_map& vm) {
  if (s.a.name == s.b.name) {
    const std::string a = name_of_overrides(s.a.overrides), b = name_of_overrides(s.b.overrides);
    if (!a.empty()) s.a.name = a;
    if (!b.empty()) s.b.name = b;
  }
  if (vm.count("name-a")) s.a.name = vm["name-a"].as<std::string>();
  if (vm.count("name-b")) s.b.name = vm["name-b"].as<std::string>();
  for (const Side* side : {&s.a, &s.b})
    if (side->name.empty() || side->name.find('/') != std::string::npos || side->name == "." ||
        side->name == "..")
      throw UsageError("--name-a and --name-b name a folder of the report's: '" + side->name +
                       "' cannot be one");
  if (s.a.name == s.b.name) s.a.name += "-A", s.b.name += "-B";
}

config::Config saved_config(const fs::path& dir) {
  config::Config cfg = config::Config::load(dir / "config.toml");
  cfg.validate(train::job_sections());
  return cfg;
}

Sides sides_from_runs(const po::variables_map& vm) {
  auto runs = vm["from-runs"].as<std::vector<std::string>>();
  if (runs.size() != 2 || vm.count("configs"))
    throw UsageError(
        "--from-runs takes two run directories, or two comma-separated lists of them\nusage: " +
        kSynopsis);
  if (vm.count("set-a") || vm.count("set-b"))
    throw UsageError("--set-a and --set-b change what is trained; --from-runs trains nothing");
  Sides s;
  s.a.dirs = split_dirs(runs[0]), s.b.dirs = split_dirs(runs[1]);
  if (s.a.dirs.empty() || s.b.dirs.empty())
    throw UsageError("--from-runs: each side needs at least one run directory");
  s.a.name = s.a.dirs[0].filename().string(), s.b.name = s.b.dirs[0].filename().string();
  name_sides(s, vm);
  if (fs::exists(s.a.dirs[0] / "config.toml") && fs::exists(s.b.dirs[0] / "config.toml"))
    s.notes =
        config::differences(config::Config::load(s.a.dirs[0] / "config.toml"),
                            config::Config::load(s.b.dirs[0] / "config.toml"), kDecisiveSections);
  s.out = vm.count("out") ? fs::path(vm["out"].as<std::string>())
                          : s.a.dirs[0].parent_path() / ("compare-" + s.a.name + "-vs-" + s.b.name);
  if (vm.count("cluster"))
    s.predictions =
        predict_both(vm["cluster"].as<std::string>(), train::read_job(saved_config(s.a.dirs[0])),
                     train::read_job(saved_config(s.b.dirs[0])));
  return s;
}

// Also completes `plan`: the overrides every training run gets and the first seed.
Sides sides_from_configs(const po::variables_map& vm, Plan& plan) {
  auto files = vm.count("configs") ? vm["configs"].as<std::vector<std::string>>()
                                   : std::vector<std::string>{};
  const auto side_sets = [&](const char* key) {
    return vm.count(key) ? vm[key].as<std::vector<std::string>>() : std::vector<std::string>{};
  };
  Sides s;
  s.a.overrides = side_sets("set-a"), s.b.overrides = side_sets("set-b");
  const bool per_side = !s.a.overrides.empty() || !s.b.overrides.empty();
  if (files.size() == 1 && per_side) files.push_back(files[0]);  // one config, two variants of it
  if (files.size() != 2)
    throw UsageError(
        "compare needs two configs, or one with --set-a/--set-b (or --from-runs DIR_A "
        "DIR_B)\nusage: " +
        kSynopsis);
  plan.overrides = sets(vm);
  if (vm.count("steps"))
    plan.overrides.push_back("train.steps=" + std::to_string(vm["steps"].as<int64_t>()));
  auto load = [&](const std::string& file, const std::vector<std::string>& mine) {
    std::vector<std::string> all = plan.overrides;
    all.insert(all.end(), mine.begin(), mine.end());
    config::Config c = config::Config::load(file, all);
    c.validate(train::job_sections());
    return c;
  };
  config::Config ca = load(files[0], s.a.overrides), cb = load(files[1], s.b.overrides);
  s.notes = config::differences(ca, cb, kDecisiveSections);
  plan.seed0 = static_cast<int64_t>(train::read_run(ca.section("run")).seed);
  s.a.name = ca.stem(), s.b.name = cb.stem(), s.a.file = files[0], s.b.file = files[1];
  name_sides(s, vm);
  s.out = vm.count("out") ? fs::path(vm["out"].as<std::string>())
                          : fs::path("runs") / ("compare-" + s.a.name + "-vs-" + s.b.name);
  if (vm.count("cluster"))
    s.predictions =
        predict_both(vm["cluster"].as<std::string>(), train::read_job(ca), train::read_job(cb));
  return s;
}

std::vector<report::Run> read_runs(const std::vector<fs::path>& dirs) {
  std::vector<report::Run> runs;
  for (const auto& d : dirs) runs.push_back(report::read_run(d));
  return runs;
}

// compare.json; `noise` is null when each side ran once.
std::string comparison_json(const Sides& s, const report::Comparison& c, const Noise* noise,
                            const fs::path& html) {
  std::ostringstream json;
  json << "{\"A\": " << json_quote(s.a.name) << ", \"B\": " << json_quote(s.b.name)
       << ", \"diverged_at\": " << c.diverged_at << ", \"steps\": " << c.steps
       << ", \"worst_loss\": " << json_number(c.worst_loss)
       << ", \"worst_grad_norm\": " << json_number(c.worst_grad) << ", \"table\": {";
  for (size_t i = 0; i < c.table.size(); ++i)
    json << (i ? ", " : "") << json_quote(c.table[i].what) << ": [" << json_number(c.table[i].a)
         << ", " << json_number(c.table[i].b) << "]";
  json << "}" << (noise ? ", " + noise_json(*noise) : "")
       << ", \"report\": " << json_quote(html.string()) << "}\n";
  return json.str();
}

// With several seeds the question is convergence, not equal bits: B may differ from A step by
// step and still lie within A's seed spread.
int exit_code(const Plan& plan, const Noise& noise, const report::Comparison& c) {
  if (plan.seeds > 1 && noise.has_loss)
    return noise.loss.final_within && noise.loss.curve_within ? kExitOk : kExitRuntime;
  return c.diverged_at ? kExitRuntime : kExitOk;
}

}  // namespace

int compare(const Args& args) {
  po::options_description opts("loom compare");
  add_compare_options(opts);
  po::positional_options_description pos;
  pos.add("configs", 2);
  po::variables_map vm;
  if (!parse(args, kSynopsis, opts, pos, vm)) return kExitOk;
  Settings set = read_settings(vm);
  const bool from_runs = vm.count("from-runs") > 0;
  Sides s = from_runs ? sides_from_runs(vm) : sides_from_configs(vm, set.plan);
  fs::create_directories(s.out);
  check_can_write(s.out / "report.html", "the report");  // before the rounds, not after them
  if (!from_runs) train_rounds(s.a, s.b, s.out, set.plan);
  const std::vector<report::Run> ra = read_runs(s.a.dirs);
  const std::vector<report::Run> rb = read_runs(s.b.dirs);
  report::Comparison c = report::compare_runs(s.a.name, ra[0], s.b.name, rb[0], set.rtol, s.notes);
  if (s.predictions) add_predictions(c, *s.predictions);
  const bool several = ra.size() > 1 || rb.size() > 1;
  Noise noise;
  if (several)
    noise = assess(s.a.name, ra, s.b.name, rb, static_cast<size_t>(set.warmup),
                   from_runs ? 0 : set.plan.seeds, vm["min-effect"].as<double>(),
                   vm["effect"].as<double>());
  const fs::path html = s.out / "report.html";
  const std::string one_sample =
      "one run of each side: its step times are one sample, which proves nothing about which is "
      "faster on a shared machine; "
      "--rounds 5 interleaves runs and says whether a difference is real";
  write_file(html,
             report::html_report(c, ra[0], rb[0],
                                 several ? noise_html(noise, set.plan.together)
                                         : "<p id=\"speed-caveat\" class=\"bad\">" +
                                               report::html_escape(one_sample) + "</p>\n"),
             "the report");
  const std::string json = comparison_json(s, c, several ? &noise : nullptr, html);
  write_file(s.out / "compare.json", json, "the comparison");
  if (vm.count("json"))
    std::fputs(json.c_str(), stdout);
  else
    std::printf("\n%s%sreport: %s\n", report::describe(c).c_str(),
                several ? ("\n" + noise.text).c_str() : ("\n" + one_sample + "\n").c_str(),
                html.c_str());
  return exit_code(set.plan, noise, c);
}

}  // namespace loom::cli
