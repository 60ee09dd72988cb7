// loom doctor RUN_DIR: what a run's metrics and events say, layer by layer.
#include <cstdio>

#include "cli/parse.hpp"
#include "report/doctor.hpp"

namespace loom::cli {

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
