// loom plan calibrate --out FILE: measures this machine for `loom plan` and writes its cluster
// file (docs/plan.md). Each op kind is timed through the runtime's own op table at several sizes
// and fitted to t = overhead + work / rate (least squares); each collective's latency and bus
// bandwidth come from `loom bench comm` over 2 local ranks; a short reference training run gives
// what the fits do not see (compute_scale) and the runtime's own memory.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/job_config.hpp"
#include "cli/parse.hpp"
#include "config/config.hpp"
#include "core/cpus.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "distributed/comm_bench.hpp"
#include "loader/registry.hpp"
#include "model/model.hpp"
#include "ops/ops.hpp"
#include "plan/estimate.hpp"
#include "plan/from_config.hpp"
#include "plan/sources.hpp"
#include "train/peak.hpp"

namespace loom::cli {

namespace {

struct Fit {
  double overhead = 0, rate = 0;  // seconds per call, work units per second
};

// Least squares of t = a + w / r over the points (w, t); a clamped at 0.
Fit fit(const std::vector<std::pair<double, double>>& pts) {
  double n = double(pts.size()), sw = 0, st = 0, sww = 0, swt = 0;
  for (auto [w, t] : pts) sw += w, st += t, sww += w * w, swt += w * t;
  const double slope = (n * swt - sw * st) / (n * sww - sw * sw), a = (st - slope * sw) / n;
  Fit f;
  f.overhead = std::max(0.0, a);
  f.rate = a < 0 ? sww / swt : 1 / slope;  // a negative intercept: refit through the origin
  return f;
}

// Best of `reps` runs of fn, in seconds.
template <class F>
double best_time(F&& fn, int reps) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Fit fit_gemm(const loom_ops_v2* o) {
  std::vector<std::pair<double, double>> pts;
  // Shapes of the models this machine trains: rows = tokens of a micro-batch, columns = widths.
  const int64_t shapes[][3] = {{256, 64, 64},     {512, 128, 64},   {1024, 128, 128},
                               {1024, 384, 128},  {2048, 128, 512}, {2048, 512, 128},
                               {2048, 1024, 128}, {4096, 256, 256}};
  for (auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N);
    const double t = best_time(
        [&] { o->gemm(0, 1, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C.data(), N); }, 7);
    pts.push_back({2.0 * M * N * K, t});
  }
  return fit(pts);
}

Fit fit_attention(const loom_ops_v2* o) {
  std::vector<std::pair<double, double>> pts;
  const int64_t shapes[][4] = {
      {4, 64, 2, 32}, {8, 64, 4, 16}, {8, 128, 4, 32}, {16, 128, 4, 32}, {4, 256, 4, 32}};
  for (auto& s : shapes) {
    const int64_t B = s[0], T = s[1], H = s[2], D = s[3], rows = B * T, w = H * D;
    std::vector<float> q(rows * w, 0.1f), k(rows * w, 0.2f), v(rows * w, 0.3f), out(rows * w),
        lse(B * H * T), dout(rows * w, 0.01f), dq(rows * w), dk(rows * w), dv(rows * w);
    const double t = best_time(
        [&] {
          o->attention_gqa_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), w, w, B, T, H,
                               H, D);
          o->attention_gqa_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                               v.data(), out.data(), lse.data(), w, w, B, T, H, H, D);
        },
        5);
    // The planner charges forward + backward as 3.5 x (overhead + F / rate), F = half of
    // 4 B T^2 H D under the causal mask: fit t / 3.5 against F.
    pts.push_back({0.5 * 4.0 * B * T * T * H * D, t / 3.5});
  }
  return fit(pts);
}

Fit fit_elementwise(const loom_ops_v2* o) {
  std::vector<std::pair<double, double>> pts;
  for (int64_t n : {4096, 16384, 65536, 262144, 1048576}) {
    std::vector<float> a(n, 1.f), b(n, 2.f), y(n);
    const double t = best_time([&] { o->add(y.data(), a.data(), b.data(), n); }, 9);
    pts.push_back({12.0 * n, t});  // two reads and a write of 4 bytes
  }
  return fit(pts);
}

// One collective's mean time per buffer size, 1 KiB to 16 MiB, from `loom bench comm` over 2
// ranks (the mean keeps the occasional stall, which training meets as often).
std::vector<std::pair<double, double>> measure_op(const std::string& comm, const std::string& op) {
  // popen runs a shell, for which /proc/self/exe is the shell: name the binary itself.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = "'" + self + "' bench comm --nproc 2 --comm " + comm + " --op " + op +
                          " --min-bytes 1K --max-bytes 16M --iters 20 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw RuntimeError("cannot run loom bench comm");
  char line[512];
  std::vector<std::pair<double, double>> rows;
  while (std::fgets(line, sizeof line, p))
    if (std::strncmp(line, "[rank 0]", 8) == 0)
      if (const auto row = dist::parse_comm_bench_row(line))
        rows.push_back({row->bytes, row->time_us * 1e-6});
  if (pclose(p) != 0 || rows.size() < 8)
    throw RuntimeError("loom bench comm --op " + op + " failed; is the '" + comm +
                       "' plugin built?");
  return rows;
}

// Latency per hop and bus bandwidth from one collective's timings, in the planner's ring terms
// for 2 ranks (an all_reduce is 2 hops and moves S; the others 1 hop and S / 2): latency from the
// median small size, bandwidth from each size of 256 KiB and more, median. Medians, because
// scheduling stalls on a shared machine land on single sizes and training does not meet them.
std::pair<double, double> alpha_beta(int op, const std::vector<std::pair<double, double>>& rows) {
  const double hops = op == LOOM_COST_ALL_REDUCE ? 2 : 1,
               share = op == LOOM_COST_ALL_REDUCE || op == LOOM_COST_SEND_RECV ? 1 : 0.5;
  std::vector<double> small, bw;
  for (auto [bytes, t] : rows)
    if (bytes <= 8192) small.push_back(t / hops);
  std::sort(small.begin(), small.end());
  const double latency = small[small.size() / 2];
  for (auto [bytes, t] : rows)
    if (bytes >= (1 << 18) && t > hops * latency)
      bw.push_back(share * bytes / (t - hops * latency));
  if (bw.empty()) throw RuntimeError("loom bench comm gave no usable timings");
  std::sort(bw.begin(), bw.end());
  return {latency, bw[bw.size() / 2]};
}

// The machine's memory, from /proc/meminfo.
double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string l;
  long long kb = 0;
  while (std::getline(in, l))
    if (std::sscanf(l.c_str(), "MemTotal: %lld kB", &kb) == 1) break;
  return double(kb) * 1024;
}

// One-thread sgemm in `n` processes at once: their GFLOP/s summed. Ranks split the cores so.
// The caller set the op table to one thread first: a child forked while a thread pool is busy
// would inherit a pool it cannot use. The children start together, from one pipe.
double concurrent_sgemm(int n) {
  int start[2];
  if (::pipe(start) != 0) throw RuntimeError("calibrate: pipe failed" + os_reason());
  std::vector<std::pair<pid_t, int>> children;
  for (int i = 0; i < n; ++i) {
    int fds[2];
    if (::pipe(fds) != 0) throw RuntimeError("calibrate: pipe failed" + os_reason());
    const pid_t pid = ::fork();
    if (pid < 0) throw RuntimeError("calibrate: fork failed" + os_reason());
    if (pid == 0) {
      ::close(fds[0]), ::close(start[1]);
      char go = 0;
      double g = 0;
      try {
        if (::read(start[0], &go, 1) == 1) g = train::measure_sgemm_gflops(1);
      } catch (...) {
        ::_exit(1);  // never unwind into the parent's code
      }
      ::_exit(::write(fds[1], &g, sizeof g) == sizeof g ? 0 : 1);
    }
    ::close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  ::close(start[0]);
  const std::string go(size_t(n), 'g');
  const bool started = ::write(start[1], go.data(), go.size()) == ssize_t(go.size());
  ::close(start[1]);
  double sum = 0;
  bool all = started;
  for (auto [pid, fd] : children) {
    double g = 0;
    all = ::read(fd, &g, sizeof g) == sizeof g && all;
    sum += g;
    ::close(fd);
    int status = 0;
    all = ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && all;
  }
  if (!all) throw RuntimeError("calibrate: a one-thread sgemm process failed");
  return sum * 1e9;
}

struct Measured {
  std::string name = "this-machine";
  int cores = 1;
  int threads = 0;  // the reference run's [run] threads: 0 = its default (every core)
  double peak1 = 0, peakn = 0, ranks_n = 0, mem_total = 0;
  Fit gemm, attention, elem;
  double latency = 0, busbw = 0;
  std::pair<double, double> ops[5];  // per loom_cost_op: latency s, bandwidth bytes/s
  std::string comm;
  int max_ranks = 4;
};

std::string cluster_text(const Measured& m, double compute_scale, double rank_compute_scale,
                         double process_mib) {
  std::ostringstream f;
  f.precision(4);
  f << "# This machine, measured by `loom plan calibrate` (" << m.cores
    << (m.cores == 1 ? " core" : " cores") << "). Figures per core: each rank\n"
    << "# gets an equal share of what all cores deliver together. A snapshot of a machine whose "
       "speed\n"
    << "# drifts with its neighbours: calibrate again before comparing predictions with runs.\n\n"
    << "[cluster]\nname = \"" << m.name << "\"\ndescription = \"this CPU machine, calibrated on "
    << m.cores << (m.cores == 1 ? " core" : " cores")
    << "\"\nnodes = 1\ndevice = \"cpu\"\ncomm = \"gloo\"\n"
    << "sources = [\"loom plan calibrate: the runtime's CPU op table (OpenBLAS sgemm), loom bench "
       "comm, a reference training run\"]\n\n"
    << "[device]\nname = \"CPU core\"\nper_node = " << m.max_ranks << "\nshared_cores = " << m.cores
    << "\nmemory_gib = " << m.mem_total / double(1ull << 30)
    << "        # MemTotal, shared by the ranks"
    << "\nhbm_gbps = " << m.elem.rate / 1e9 << "             # element-wise 'add', 1 thread"
    << "\npeak_tflops_fp32 = " << m.peak1 / 1e12 << "      # sgemm 2048 x 1024 x 1024, 1 thread"
    << "\nthread_scaling = " << m.peakn / m.peak1 << "         # sgemm on " << m.cores
    << " threads over 1"
    << "\nrank_scaling = " << m.ranks_n / m.peak1 << "           # sgemm in " << m.cores
    << " one-thread processes at once over 1\n\n"
    << "[intra]\nkind = \"loopback\"\nbandwidth_gbps = " << m.busbw / 1e9 << "       # " << m.comm
    << " all_reduce, 256 KiB - 16 MiB, 2 ranks\nlatency_us = " << m.latency * 1e6 << "\n\n"
    << "[inter]\nkind = \"none\"\n\n"
    << "[intra_ops]                # " << m.comm
    << ", 2 ranks: [latency per hop us, bus bandwidth GB/s]\n";
  const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"};
  for (int op = 0; op < 5; ++op)
    f << names[op] << " = [" << m.ops[op].first * 1e6 << ", " << m.ops[op].second / 1e9 << "]\n";
  f << "\n"
    << "[efficiency]\ngemm = " << std::min(1.0, m.gemm.rate / m.peak1)
    << "\ngemm_overhead_us = " << m.gemm.overhead * 1e6
    << "\nattention = " << std::min(1.0, m.attention.rate / m.peak1)
    << "\nattention_overhead_us = " << m.attention.overhead * 1e6
    << "\nmemory = 1.0\nelementwise_overhead_us = " << m.elem.overhead * 1e6 << "\ncomm = 1.0"
    << "\ncompute_scale = " << compute_scale
    << "         # reference run's step over the modelled one"
    << "\nrank_compute_scale = " << rank_compute_scale
    << "    # the same with one one-thread rank per core"
    << "\nstep_overhead_ms = 0\nprocess_mib = " << process_mib
    << "            # reference run's peak RSS less its model\n";
  return f.str();
}

// A short training run of a shape no accuracy check uses (d_model 96, 3 layers, T 96) over `ranks`
// ranks, against the model's prediction: the ratio of the compute it measured (the fastest step
// less what the model puts outside the micro-batch loop) to the modelled compute becomes
// compute_scale (one rank, every core's threads) or rank_compute_scale (one one-thread rank per
// core), and the peak memory left over after the modelled parts the runtime's own (process_mib).
std::pair<double, double> reference_run(const std::string& text, int ranks, int threads) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char tmpl[] = "/tmp/loom-calibrate-XXXXXX";
  if (!mkdtemp(tmpl)) throw RuntimeError("cannot make a temporary directory" + os_reason());
  const std::filesystem::path dir = tmpl;
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  {
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 3000; ++i)
      corpus << "a reference run measures what the op fits miss " << i % 17 << "\n";
  }
  std::ofstream(dir / "cluster.toml") << text;
  std::ofstream(dir / "ref.toml")
      << "[run]\nlog_every = 1000\n[model]\nn_layer = 3\nn_head = 4\nd_model = 96\nseq_len = 96\n"
      << "[data]\ndir = \"" << (dir / "data").string() << "\"\n"
      << "[train]\nsteps = 20\nglobal_batch = 16\neval_every = 0\n";
  const std::string q = "'", d = dir.string();
  if (std::system((q + self + "' data prepare --text '" + d + "/corpus.txt' --out '" + d +
                   "/data' > /dev/null 2>&1")
                      .c_str()) != 0 ||
      std::system((q + self + "' train '" + d +
                   "/ref.toml' --set parallel.nproc=" + std::to_string(ranks) +
                   (threads > 0 ? " --set run.threads=" + std::to_string(threads) : std::string()) +
                   " --set train.global_batch=" + std::to_string(16 * ranks) + " --run-dir '" + d +
                   "/run' > '" + d + "/train.log' 2>&1")
                      .c_str()) != 0)
    throw RuntimeError("the reference training run failed; see loom train on a small config");
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  std::vector<double> steps;
  double peak = 0;
  std::string line;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("step_ms")) continue;
    steps.push_back(j["step_ms"].get<double>());
    peak = std::max(peak, j["peak_mem_bytes"].get<double>());
  }
  if (steps.size() < 6) throw RuntimeError("the reference training run logged too few steps");
  steps.erase(steps.begin(), steps.begin() + 3);  // warm-up
  // The fastest step: neighbours on a shared machine only add time, so it is the machine's own
  // speed, and the op fits above are best-of timings too.
  const double measured = *std::min_element(steps.begin(), steps.end());
  config::Config cfg =
      config::Config::load(dir / "ref.toml", {"train.global_batch=" + std::to_string(16 * ranks)});
  cfg.validate(train::job_sections());
  const train::JobSettings job = train::read_job(cfg);
  const plan::Workload w = plan::workload_of(job);
  const plan::Layout l = plan::layout_of(job, ranks);
  plan::PluginSources sources(plugins::Registry::default_dirs());
  const plan::Estimate e = plan::estimate(plan::load_cluster(dir / "cluster.toml"), w, l,
                                          sources.costs(), sources.pipes());
  const double scale = std::max(0.1, (measured - (e.step_ms - e.pipeline_ms)) / e.pipeline_ms);
  const double process = std::max(0.0, peak - (e.memory.total() - e.memory.process));
  std::fprintf(stderr,
               "  reference run on %d rank%s: %.1f ms measured, %.1f ms modelled: scale %.3f; peak "
               "memory %.1f MiB\n",
               ranks, ranks > 1 ? "s" : "", measured, e.step_ms, scale, peak / (1 << 20));
  return {scale, process / (1 << 20)};
}

}  // namespace

int plan_calibrate(const Args& args) {
  po::options_description opts("loom plan calibrate");
  opts.add_options()("out", po::value<std::string>()->required(), "cluster file to write")(
      "comm", po::value<std::string>()->default_value("gloo"), "comm backend to measure")(
      "max-ranks", po::value<int>()->default_value(4), "ranks the file allows per node")(
      "cores", po::value<int>(),
      "measure a node of this many of this machine's cores (default: every core this process may "
      "use)")("name", po::value<std::string>()->default_value("this-machine"),
              "the cluster's name in the file");
  po::variables_map vm;
  if (!parse(
          args,
          "loom plan calibrate --out FILE [--comm gloo] [--max-ranks N] [--cores N] [--name NAME]",
          opts, {}, vm))
    return kExitOk;
  const std::string out_path = vm["out"].as<std::string>();
  check_can_write(out_path, "cluster file");  // before a minute of measuring, not after it
  Measured m;
  m.cores =
      usable_cpus()
          .cpus;  // what this process may use (affinity, cgroup quota), not the machine's count
  if (vm.count("cores")) {
    // A node of fewer cores (a namespace node of scripts/local-cluster.sh runs one one-thread
    // rank).
    const int cores = vm["cores"].as<int>();
    if (cores < 1 || cores > m.cores)
      throw UsageError("--cores must be from 1 to the " + std::to_string(m.cores) +
                       " this process may use");
    m.threads = m.cores = cores;
  }
  m.name = vm["name"].as<std::string>();
  m.comm = vm["comm"].as<std::string>();
  m.max_ranks = vm["max-ranks"].as<int>();
  m.mem_total = mem_total_bytes();
  const loom_ops_v2* o = ops::cpu();
  std::fprintf(stderr, "calibrating on %d cores: sgemm peak...\n", m.cores);
  ops::set_threads("cpu", 1);
  m.peak1 = train::measure_sgemm_gflops(1) * 1e9;
  std::fprintf(stderr,
               "  1 thread: %.1f GFLOP/s; GEMM, attention and element-wise fits on 1 thread...\n",
               m.peak1 / 1e9);
  m.gemm = fit_gemm(o), m.attention = fit_attention(o), m.elem = fit_elementwise(o);
  ops::set_threads("cpu", m.cores);
  m.peakn = train::measure_sgemm_gflops(m.cores) * 1e9;
  ops::set_threads("cpu", 1);
  m.ranks_n = concurrent_sgemm(m.cores);
  std::fprintf(stderr,
               "  %d threads: %.1f GFLOP/s; %d one-thread processes: %.1f GFLOP/s together; comm "
               "over 2 ranks (loom bench comm)...\n",
               m.cores, m.peakn / 1e9, m.cores, m.ranks_n / 1e9);
  const char* ops[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                       "sendrecv"};  // loom_cost_op order
  for (int op = 0; op < 5; ++op) m.ops[op] = alpha_beta(op, measure_op(m.comm, ops[op]));
  std::tie(m.latency, m.busbw) = m.ops[0];
  std::fprintf(stderr, "  %s: %.1f us per hop, %.2f GB/s; a reference training run...\n",
               m.comm.c_str(), m.latency * 1e6, m.busbw / 1e9);
  const auto [scale, process_mib] = reference_run(cluster_text(m, 1.0, 1.0, 0.0), 1, m.threads);
  // Ranks past a node's count would go over the network a CPU file does not have.
  const int ranks = std::min(m.cores, m.max_ranks);
  const double rank_scale =
      ranks > 1 ? reference_run(cluster_text(m, scale, 1.0, process_mib), ranks, 0).first : scale;
  const std::string text = cluster_text(m, scale, rank_scale, process_mib);
  write_file(out_path, text, "cluster file");
  std::printf("%s", text.c_str());
  std::fprintf(stderr, "wrote %s\n", out_path.c_str());
  return kExitOk;
}

}  // namespace loom::cli
