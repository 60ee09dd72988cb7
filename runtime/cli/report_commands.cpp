// loom compare A.toml B.toml [--steps N] [--set k=v]... [--rtol R] [--out DIR]
// loom compare --from-runs DIR_A DIR_B [--rtol R] [--out DIR]
// loom doctor RUN_DIR
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/parse.hpp"
#include "config/config.hpp"
#include "report/compare.hpp"
#include "report/doctor.hpp"

namespace fs = std::filesystem;

namespace loom::cli {

namespace {

// Runs `argv` as a child with this process's stdout and stderr; returns its exit code.
int run_child(const std::vector<std::string>& argv) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) throw RuntimeError("fork failed");
  if (pid == 0) {
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string text_of(const toml::node* n) {
  if (!n) return "(unset)";
  std::ostringstream s;
  if (auto v = n->as_string()) s << '"' << v->get() << '"';
  else n->visit([&](const auto& x) { s << x; });
  return s.str();
}

// Every setting that differs between the two configs, "section.key: A -> B", in the sections that
// decide what is trained and how (run.seed, model, data, train, parallel, plugins).
std::vector<std::string> differences(const config::Config& a, const config::Config& b) {
  std::vector<std::string> out;
  auto diff = [&](const std::string& path) {
    const toml::node* x = a.table().at_path(path).node();
    const toml::node* y = b.table().at_path(path).node();
    if ((x && x->is_table()) || (y && y->is_table())) return;
    const std::string tx = text_of(x), ty = text_of(y);
    if (tx != ty) out.push_back("B differs from A in " + path + ": " + tx + " -> " + ty);
  };
  diff("run.seed");
  for (const char* section : {"model", "data", "train", "parallel", "plugins"}) {
    std::vector<std::string> keys;
    for (const auto* cfg : {&a, &b})
      if (const toml::table* t = cfg->table()[section].as_table())
        for (const auto& [k, v] : *t)
          if (std::find(keys.begin(), keys.end(), std::string(k.str())) == keys.end()) keys.push_back(std::string(k.str()));
    for (const auto& k : keys) diff(std::string(section) + "." + k);
  }
  return out;
}

}  // namespace

int compare(const Args& args) {
  po::options_description opts("loom compare");
  add_set_option(opts);
  opts.add_options()("configs", po::value<std::vector<std::string>>()->multitoken(), "A.toml B.toml")(
      "from-runs", po::value<std::vector<std::string>>()->multitoken(), "compare two finished run directories")(
      "steps", po::value<int64_t>(), "train each config this many steps (default: its own train.steps)")(
      "rtol", po::value<double>()->default_value(1e-4, "1e-4"), "relative tolerance for loss and grad norm")(
      "out", po::value<std::string>(), "directory for the two runs and report.html (default runs/compare-A-vs-B)");
  po::positional_options_description pos;
  pos.add("configs", 2);
  po::variables_map vm;
  const std::string synopsis =
      "loom compare A.toml B.toml [--steps N] [--set k=v]... [--rtol R] [--out DIR]\n"
      "       loom compare --from-runs DIR_A DIR_B [--rtol R] [--out DIR]";
  if (!parse(args, synopsis, opts, pos, vm)) return kExitOk;
  const double rtol = vm["rtol"].as<double>();
  if (!(rtol >= 0)) throw UsageError("--rtol must be >= 0");

  fs::path dir_a, dir_b, out;
  std::string name_a = "A", name_b = "B";
  std::vector<std::string> notes;
  if (vm.count("from-runs")) {
    auto runs = vm["from-runs"].as<std::vector<std::string>>();
    if (runs.size() != 2 || vm.count("configs")) throw UsageError("--from-runs takes exactly two run directories\nusage: " + synopsis);
    // "runs/a/" names "a", like "runs/a".
    dir_a = fs::path(runs[0]).lexically_normal(), dir_b = fs::path(runs[1]).lexically_normal();
    if (!dir_a.has_filename()) dir_a = dir_a.parent_path();
    if (!dir_b.has_filename()) dir_b = dir_b.parent_path();
    name_a = dir_a.filename().string(), name_b = dir_b.filename().string();
    if (name_a == name_b) name_a += "-A", name_b += "-B";
    if (fs::exists(dir_a / "config.toml") && fs::exists(dir_b / "config.toml"))
      notes = differences(config::Config::load(dir_a / "config.toml"), config::Config::load(dir_b / "config.toml"));
    out = vm.count("out") ? fs::path(vm["out"].as<std::string>()) : dir_a.parent_path() / ("compare-" + name_a + "-vs-" + name_b);
  } else {
    auto files = vm.count("configs") ? vm["configs"].as<std::vector<std::string>>() : std::vector<std::string>{};
    if (files.size() != 2) throw UsageError("compare needs two configs (or --from-runs DIR_A DIR_B)\nusage: " + synopsis);
    std::vector<std::string> overrides = sets(vm);
    if (vm.count("steps")) overrides.push_back("train.steps=" + std::to_string(vm["steps"].as<int64_t>()));
    config::Config a = config::Config::load(files[0], overrides), b = config::Config::load(files[1], overrides);
    a.validate_runtime();
    b.validate_runtime();
    notes = differences(a, b);
    name_a = a.stem(), name_b = b.stem();
    if (name_a == name_b) name_a += "-A", name_b += "-B";
    out = vm.count("out") ? fs::path(vm["out"].as<std::string>()) : fs::path("runs") / ("compare-" + name_a + "-vs-" + name_b);
    dir_a = out / name_a, dir_b = out / name_b;
    for (auto [file, dir, name] : {std::tuple{files[0], dir_a, name_a}, {files[1], dir_b, name_b}}) {
      std::printf("== %s: loom train %s\n", name.c_str(), file.c_str());
      std::vector<std::string> argv = {self_invocation()[0], "train", file, "--run-dir", dir.string()};
      for (const auto& s : overrides) argv.insert(argv.end(), {"--set", s});
      const int rc = run_child(argv);
      if (rc != 0) throw RuntimeError("training " + name + " (" + file + ") failed with exit code " + std::to_string(rc));
    }
  }
  report::Run a = report::read_run(dir_a), b = report::read_run(dir_b);
  report::Comparison c = report::compare_runs(name_a, a, name_b, b, rtol, notes);
  fs::create_directories(out);
  const fs::path html = out / "report.html";
  std::ofstream(html) << report::html_report(c, a, b);
  std::printf("\n%sreport: %s\n", report::describe(c).c_str(), html.c_str());
  return c.diverged_at ? kExitRuntime : kExitOk;
}

int doctor(const Args& args) {
  po::options_description opts("loom doctor");
  opts.add_options()("dir", po::value<std::string>()->required(), "a run directory");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse(args, "loom doctor RUN_DIR", opts, pos, vm)) return kExitOk;
  report::Diagnosis d = report::diagnose(report::read_run(vm["dir"].as<std::string>()));
  std::fputs(d.text.c_str(), stdout);
  return kExitOk;
}

}  // namespace loom::cli
