// bench_gloo_baseline: gloo's own AllreduceRingChunked, driven directly (no Loom in the path), as
// the baseline `loom bench comm --op all_reduce` is compared with. Run it as ranks of a job:
//   loom launch -n 2 -- bench_gloo_baseline [--bytes 64M] [--iters 20] [--reuse 0|1]
// --reuse 1 builds the algorithm once and reruns it (gloo's best case); 0 builds it per call, as
// a collective library over arbitrary buffers must.
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  long long bytes = 64ll << 20;
  int iters = 20, reuse = 1;
  std::string dir = "/tmp/loom-gloo-baseline-" +
                    std::string(std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0");
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--bytes")
      bytes = std::atoll(v.c_str()) * (v.back() == 'M' ? 1 << 20 : v.back() == 'K' ? 1024 : 1);
    if (a == "--iters") iters = std::atoi(v.c_str());
    if (a == "--reuse") reuse = std::atoi(v.c_str());
  }
  const char* r = std::getenv("RANK");
  const char* w = std::getenv("WORLD_SIZE");
  if (!r || !w) {
    std::fprintf(stderr, "run under loom launch -n N --\n");
    return 2;
  }
  int rank = std::atoi(r), size = std::atoi(w);
  std::filesystem::create_directories(dir);
  gloo::rendezvous::FileStore store(dir);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, dev);
  const int count = static_cast<int>(bytes / 4);
  std::vector<float> data(count, 1.f);
  float* p = data.data();
  std::unique_ptr<gloo::AllreduceRingChunked<float>> algo;
  if (reuse)
    algo = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, std::vector<float*>{p}, count);
  auto once = [&] {
    if (reuse) {
      algo->run();
    } else {
      gloo::AllreduceRingChunked<float> a(ctx, {p}, count);
      a.run();
    }
  };
  for (int i = 0; i < 5; ++i) once();
  gloo::BarrierAllToOne(ctx).run();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
      iters;
  double algbw = bytes / (us * 1e-6) / 1e9, busbw = algbw * 2.0 * (size - 1) / size;
  if (rank == 0)
    std::printf(
        "gloo AllreduceRingChunked (%s): %lld bytes, %d ranks: %.1f us, algbw %.3f GB/s, busbw "
        "%.3f GB/s\n",
        reuse ? "built once" : "built per call", bytes, size, us, algbw, busbw);
  gloo::BarrierAllToOne(ctx).run();
  if (rank == 0) std::filesystem::remove_all(dir);
  return 0;
}
