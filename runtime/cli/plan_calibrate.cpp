// loom plan calibrate --out FILE: measures this machine for `loom plan` and writes its cluster
// file. Each op kind is timed through the runtime's own op table at several sizes and fitted to
// t = overhead + work / rate (least squares); the comm backend's latency and bus bandwidth come
// from `loom bench comm` over 2 local ranks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/parse.hpp"
#include "core/errors.hpp"
#include "ops/ops.hpp"
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
  f.rate = 1 / slope;
  if (a < 0) {  // refit through the origin
    f.rate = sww / swt;
  }
  return f;
}

// Best of `reps` runs of fn, in seconds.
template <class F>
double best_time(F&& fn, int reps) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Fit fit_gemm(const loom_ops* o) {
  std::vector<std::pair<double, double>> pts;
  // Shapes of the models this machine trains: rows = tokens of a micro-batch, columns = widths.
  const int64_t shapes[][3] = {{256, 64, 64},    {512, 128, 64},   {1024, 128, 128}, {1024, 384, 128},
                               {2048, 128, 512}, {2048, 512, 128}, {2048, 1024, 128}, {4096, 256, 256}};
  for (auto& s : shapes) {
    const int64_t M = s[0], N = s[1], K = s[2];
    std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N);
    const double t = best_time([&] { o->gemm(0, 1, M, N, K, 1.f, A.data(), K, B.data(), K, 0.f, C.data(), N); }, 7);
    pts.push_back({2.0 * M * N * K, t});
  }
  return fit(pts);
}

Fit fit_attention(const loom_ops* o) {
  std::vector<std::pair<double, double>> pts;
  const int64_t shapes[][4] = {{4, 64, 2, 32}, {8, 64, 4, 16}, {8, 128, 4, 32}, {16, 128, 4, 32}, {4, 256, 4, 32}};
  for (auto& s : shapes) {
    const int64_t B = s[0], T = s[1], H = s[2], D = s[3], rows = B * T, w = H * D;
    std::vector<float> q(rows * w, 0.1f), k(rows * w, 0.2f), v(rows * w, 0.3f), out(rows * w), lse(B * H * T),
        dout(rows * w, 0.01f), dq(rows * w), dk(rows * w), dv(rows * w);
    const double t = best_time([&] {
      o->attention_gqa_fwd(out.data(), lse.data(), q.data(), k.data(), v.data(), w, w, B, T, H, H, D);
      o->attention_gqa_bwd(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                           lse.data(), w, w, B, T, H, H, D);
    }, 5);
    // The planner's count: half of 4 B T^2 H D forward under the causal mask, backward 2.5x.
    pts.push_back({3.5 * 0.5 * 4.0 * B * T * T * H * D, t / 2});
  }
  Fit f = fit(pts);
  f.overhead /= 1;  // per call: forward and backward each count one call in the model
  return f;
}

Fit fit_elementwise(const loom_ops* o) {
  std::vector<std::pair<double, double>> pts;
  for (int64_t n : {4096, 16384, 65536, 262144, 1048576}) {
    std::vector<float> a(n, 1.f), b(n, 2.f), y(n);
    const double t = best_time([&] { o->add(y.data(), a.data(), b.data(), n); }, 9);
    pts.push_back({12.0 * n, t});  // two reads and a write of 4 bytes
  }
  return fit(pts);
}

// Latency per hop and bus bandwidth of the comm backend: `loom bench comm` over 2 ranks.
std::pair<double, double> fit_comm(const std::string& comm) {
  std::vector<std::string> argv = self_invocation();
  std::string cmd = "'" + argv[0] + "' bench comm --nproc 2 --comm " + comm +
                    " --min-bytes 1K --max-bytes 16M --iters 10 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw RuntimeError("cannot run loom bench comm");
  char line[512];
  std::vector<double> small, busbw;
  while (std::fgets(line, sizeof line, p)) {
    double bytes, count, root, time_us, algbw, bus;
    char type[32], op[32];
    if (std::sscanf(line, "[rank 0] %lf %lf %31s %31s %lf %lf %lf %lf", &bytes, &count, type, op, &root, &time_us, &algbw,
                    &bus) != 8)
      continue;
    if (bytes <= 8192) small.push_back(time_us * 1e-6);
    if (bytes >= (1 << 20)) busbw.push_back(bus * 1e9);
  }
  if (pclose(p) != 0 || small.empty() || busbw.empty()) throw RuntimeError("loom bench comm failed; is the '" + comm + "' plugin built?");
  // The fastest small all-reduce is latency (2 hops of a 2-rank ring); the median large one is
  // bandwidth (scheduling noise on a shared machine lands on single sizes).
  std::sort(busbw.begin(), busbw.end());
  return {*std::min_element(small.begin(), small.end()) / 2, busbw[busbw.size() / 2]};
}

double rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string l;
  long long kb = 0;
  while (std::getline(in, l))
    if (std::sscanf(l.c_str(), "VmHWM: %lld kB", &kb) == 1) break;
  return double(kb) * 1024;
}

}  // namespace

int plan_calibrate(const Args& args) {
  po::options_description opts("loom plan calibrate");
  opts.add_options()("out", po::value<std::string>()->required(), "cluster file to write")(
      "comm", po::value<std::string>()->default_value("gloo"), "comm backend to measure")(
      "max-ranks", po::value<int>()->default_value(4), "ranks the file allows per node");
  po::variables_map vm;
  if (!parse(args, "loom plan calibrate --out FILE [--comm gloo] [--max-ranks N]", opts, {}, vm)) return kExitOk;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const loom_ops* o = ops::cpu();
  std::fprintf(stderr, "calibrating on %d cores: sgemm peak...\n", cores);
  ops::set_threads("cpu", 1);
  const double peak1 = train::measure_sgemm_gflops(1) * 1e9;
  std::fprintf(stderr, "  1 thread: %.1f GFLOP/s; GEMM, attention and element-wise fits on 1 thread...\n", peak1 / 1e9);
  const Fit gemm = fit_gemm(o), attention = fit_attention(o), elem = fit_elementwise(o);
  ops::set_threads("cpu", cores);
  const double peakn = train::measure_sgemm_gflops(cores) * 1e9;
  ops::set_threads("cpu", 1);
  std::fprintf(stderr, "  %d threads: %.1f GFLOP/s; comm over 2 ranks (loom bench comm)...\n", cores, peakn / 1e9);
  const auto [latency, busbw] = fit_comm(vm["comm"].as<std::string>());
  const double process = rss_bytes();
  std::ostringstream f;
  f.precision(4);
  f << "# This machine, measured by `loom plan calibrate` (" << cores << " cores). Figures per core: a rank\n"
    << "# gets cores / ranks threads (at least one), and ranks beyond the cores take turns.\n\n"
    << "[cluster]\nname = \"this-machine\"\ndescription = \"this CPU machine, calibrated\"\nnodes = 1\n"
    << "sources = [\"loom plan calibrate: the runtime's CPU op table (OpenBLAS sgemm), loom bench comm\"]\n\n"
    << "[device]\nname = \"CPU core\"\nper_node = " << vm["max-ranks"].as<int>() << "\nshared_cores = " << cores
    << "\nmemory_gib = 16.0\nhbm_gbps = " << elem.rate / 1e9 << "             # element-wise 'add', 1 thread"
    << "\npeak_tflops_fp32 = " << peak1 / 1e12 << "      # sgemm 1024^3, 1 thread"
    << "\nthread_scaling = " << peakn / peak1 << "         # sgemm on " << cores << " threads over 1\n\n"
    << "[intra]\nkind = \"loopback\"\nbandwidth_gbps = " << busbw / 1e9 << "       # " << vm["comm"].as<std::string>()
    << " all_reduce busbw, 1-16 MiB, 2 ranks\nlatency_us = " << latency * 1e6 << "\n\n"
    << "[inter]\nkind = \"none\"\n\n"
    << "[efficiency]\ngemm = " << std::min(1.0, gemm.rate / peak1) << "\ngemm_overhead_us = " << gemm.overhead * 1e6
    << "\nattention = " << std::min(1.0, attention.rate / peak1) << "\nattention_overhead_us = " << attention.overhead * 1e6
    << "\nmemory = 1.0\nelementwise_overhead_us = " << elem.overhead * 1e6 << "\ncomm = 1.0\nstep_overhead_ms = 0\n"
    << "process_mib = " << process / (1 << 20) << "            # this process after the measurements\n";
  std::ofstream out(vm["out"].as<std::string>());
  if (!out) throw UsageError("cannot write '" + vm["out"].as<std::string>() + "'");
  out << f.str();
  std::printf("%s", f.str().c_str());
  std::fprintf(stderr, "wrote %s\n", vm["out"].as<std::string>().c_str());
  return kExitOk;
}

}  // namespace loom::cli
