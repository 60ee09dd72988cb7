// nccl: the comm slot over NCCL, for GPUs.
//
// Bootstrap: rank 0 of each new communicator makes an ncclUniqueId and publishes it through the
// runtime's store; the mesh groups come from ncclCommSplit. Communicators are non-blocking
// (config.blocking = 0) so that no call can hang: every call is settled by polling
// ncclCommGetAsyncError, and a peer that never shows up past the timeout aborts the
// communicator (ncclCommAbort) and becomes an error naming the operation.
//
// Every operation of every communicator runs on one stream per rank, so operations of different
// groups (ddp's buckets, the expert all-to-alls) run in the program's issue order, the same on
// every rank, rather than concurrently, which NCCL documents as a deadlock hazard. A handle is a
// CUDA event recorded after its operation. Tensors in host memory (the runtime's scalars, CPU
// runs of the bench) are staged through device memory and copied back when waited for.
//
// Point-to-point (pipelines) is refused for now: the pipeline executor posts its receives at the
// start of a step and sends without waiting, and on one stream a posted ncclRecv or an unmatched
// ncclSend holds up everything queued behind it. It needs matched sends and receives grouped
// (ncclGroupStart/End) per schedule action, which the executor does not issue yet.
#include <loom/sdk.hpp>

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct loom_comm {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, splits = 0;
  cudaStream_t stream = nullptr;
  std::chrono::milliseconds timeout{300000};
};

// An issued operation: the event after it, and a staged host output to copy back.
struct loom_work {
  cudaEvent_t done = nullptr;
  loom_comm* comm = nullptr;
  std::string what;
  void* device_copy = nullptr;  // staging buffer (device), freed at wait
  void* host_out = nullptr;     // where the staged result goes
  size_t bytes = 0;
};

namespace {

using loom::sdk::Error;
using Clock = std::chrono::steady_clock;

void cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(LOOM_FATAL, what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(int32_t dtype) {
  switch (dtype) {
    case LOOM_F32: return ncclFloat32;
    case LOOM_F64: return ncclFloat64;
    case LOOM_BF16: return ncclBfloat16;
    case LOOM_F16: return ncclFloat16;
    case LOOM_I32: return ncclInt32;
    case LOOM_I64: return ncclInt64;
    default: return ncclUint8;  // fp8 and bytes move as bytes (no reduction over them)
  }
}

ncclRedOp_t nccl_op(int32_t op) {
  switch (op & 0xff) {  // LOOM_COMM_PERSISTENT is a hint this plugin does not need
    case LOOM_REDUCE_AVG: return ncclAvg;
    case LOOM_REDUCE_MAX: return ncclMax;
    case LOOM_REDUCE_MIN: return ncclMin;
    default: return ncclSum;
  }
}

bool on_host(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

class Nccl : public loom::sdk::CommPlugin {
 public:
  static int score(const loom::sdk::Host&, std::string& why_not) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      cudaGetLastError();
      why_not = "no CUDA device visible: use comm = \"gloo\" or \"mpi\" on CPUs";
      return 0;
    }
    return 10;
  }
  // CUDA memory goes to NCCL as it is (host buffers it stages itself): the runtime never stages
  // for it (LOOM_COMM_DEVICES).
  static const void* extension(const char* name) {
    static const uint32_t devices = (1u << LOOM_DEVICE_CPU) | (1u << LOOM_DEVICE_CUDA);
    return std::strcmp(name, LOOM_COMM_DEVICES) == 0 ? &devices : nullptr;
  }
  static constexpr loom::sdk::About about{.name = "nccl",
                                          .version = "1.0.0",
                                          .summary = "GPU collectives over NCCL, on a comm stream, abortable",
                                          .score = &score,
                                          .get_proc = &extension};

  explicit Nccl(const loom::sdk::Context& ctx) : host_(ctx.host) {}

  ~Nccl() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) override {
    store_ = &store;
    int devices = 0;
    cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    const char* local = std::getenv("LOCAL_RANK");
    cuda(cudaSetDevice((local ? std::atoi(local) : rank) % devices), "cudaSetDevice");
    ncclUniqueId id{};
    const std::string key = "nccl/world/id";
    if (rank == 0) {
      check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
      put(key, &id, sizeof id);
    } else {
      std::vector<char> got = fetch(key);
      if (got.size() != sizeof id) throw Error(LOOM_FATAL, "nccl: the unique id in the store has the wrong size");
      std::memcpy(&id, got.data(), sizeof id);
    }
    auto* c = new loom_comm;
    c->rank = rank, c->size = size, c->timeout = std::chrono::milliseconds(timeout_ms);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&c->comm, size, id, rank, &config), c, "ncclCommInitRankConfig");
    settle(c, "initialising the world communicator");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    c->stream = stream_;
    return c;
  }

  loom_comm* split(loom_comm* parent, int color, int key) override {
    auto* c = new loom_comm;
    c->timeout = parent->timeout;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommSplit(parent->comm, color, key, &c->comm, &config), parent, "ncclCommSplit");
    settle(parent, "splitting a communicator");
    settle(c, "splitting a communicator");
    check(ncclCommCount(c->comm, &c->size), c, "ncclCommCount");
    check(ncclCommUserRank(c->comm, &c->rank), c, "ncclCommUserRank");
    c->stream = stream_;
    return c;
  }

  void free_comm(loom_comm* c) override {
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);  // the stream is the plugin's, shared
    if (c->comm) ncclCommDestroy(c->comm);
    delete c;
  }

  int rank(const loom_comm* c) override { return c->rank; }
  int size(const loom_comm* c) override { return c->size; }

  loom_work* all_reduce(loom_comm* c, loom_tensor& buf, loom_reduce_op op, bool async) override {
    const size_t n = static_cast<size_t>(loom::sdk::numel(buf));
    Staged s = stage(c, buf.data, n * loom::sdk::element_size(buf.dtype), true);
    check(ncclAllReduce(s.ptr, s.ptr, n, nccl_type(buf.dtype), nccl_op(op), c->comm, c->stream), c, "ncclAllReduce");
    return finish(c, "all_reduce", s, buf.data, async);
  }

  loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out, loom_reduce_op op,
                            bool async) override {
    const size_t n = static_cast<size_t>(loom::sdk::numel(out)), es = loom::sdk::element_size(in.dtype);
    Staged si = stage(c, in.data, n * c->size * es, true), so = stage(c, out.data, n * es, false);
    check(ncclReduceScatter(si.ptr, so.ptr, n, nccl_type(in.dtype), nccl_op(op), c->comm, c->stream), c,
          "ncclReduceScatter");
    settle(c, "reduce_scatter");  // on the stream now: the staged input may be freed after it
    release(c, si);
    return finish(c, "reduce_scatter", so, out.data, async);
  }

  loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out, bool async) override {
    const size_t n = static_cast<size_t>(loom::sdk::numel(in)), es = loom::sdk::element_size(in.dtype);
    Staged si = stage(c, in.data, n * es, true), so = stage(c, out.data, n * c->size * es, false);
    check(ncclAllGather(si.ptr, so.ptr, n, nccl_type(in.dtype), c->comm, c->stream), c, "ncclAllGather");
    settle(c, "all_gather");
    release(c, si);
    return finish(c, "all_gather", so, out.data, async);
  }

  loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) override {
    const size_t n = static_cast<size_t>(loom::sdk::numel(buf));
    Staged s = stage(c, buf.data, n * loom::sdk::element_size(buf.dtype), true);
    check(ncclBroadcast(s.ptr, s.ptr, n, nccl_type(buf.dtype), root, c->comm, c->stream), c, "ncclBroadcast");
    return finish(c, "broadcast", s, buf.data, async);
  }

  // A grouped send to and receive from every peer, blocks packed in rank order.
  loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out, const int64_t* send_counts,
                        const int64_t* recv_counts, bool async) override {
    const size_t es = loom::sdk::element_size(in.dtype);
    std::vector<size_t> sc(c->size), rc(c->size), so(c->size + 1, 0), ro(c->size + 1, 0);
    for (int p = 0; p < c->size; ++p) {
      sc[p] = static_cast<size_t>(send_counts ? send_counts[p] : loom::sdk::numel(in) / c->size) * es;
      rc[p] = static_cast<size_t>(recv_counts ? recv_counts[p] : loom::sdk::numel(out) / c->size) * es;
      so[p + 1] = so[p] + sc[p], ro[p + 1] = ro[p] + rc[p];
    }
    Staged si = stage(c, in.data, so[c->size], true), sr = stage(c, out.data, ro[c->size], false);
    check(ncclGroupStart(), c, "ncclGroupStart");
    for (int p = 0; p < c->size; ++p) {
      if (sc[p]) check(ncclSend(static_cast<char*>(si.ptr) + so[p], sc[p], ncclUint8, p, c->comm, c->stream), c, "ncclSend");
      if (rc[p]) check(ncclRecv(static_cast<char*>(sr.ptr) + ro[p], rc[p], ncclUint8, p, c->comm, c->stream), c, "ncclRecv");
    }
    check(ncclGroupEnd(), c, "ncclGroupEnd");
    settle(c, "all_to_all");
    release(c, si);
    return finish(c, "all_to_all", sr, out.data, async);
  }

  loom_work* send(loom_comm*, const loom_tensor&, int peer, int, bool) override { return refuse_p2p("send to", peer); }
  loom_work* recv(loom_comm*, loom_tensor&, int peer, int, bool) override { return refuse_p2p("recv from", peer); }

  void barrier(loom_comm* c) override {
    float one = 1.f;
    loom_tensor t = loom::sdk::flat_tensor(&one, LOOM_F32, 1);
    all_reduce(c, t, LOOM_REDUCE_SUM, false);
  }

  // Polls the event, watching for asynchronous NCCL errors and the timeout; a stuck operation
  // aborts its communicator so that it cannot hang the job.
  void wait(loom_work* work) override {
    std::unique_ptr<loom_work> w(work);
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t e = cudaEventQuery(w->done);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) cuda(e, "nccl " + w->what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(w->comm->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(w->comm->comm);
        throw Error(LOOM_FATAL, "nccl " + w->what + " failed on rank " + std::to_string(w->comm->rank) + ": " +
                                    ncclGetErrorString(async) + " (" + ncclGetLastError(nullptr) + ")");
      }
      if (Clock::now() - start > w->comm->timeout) {
        ncclCommAbort(w->comm->comm);
        throw Error(LOOM_FATAL, "nccl " + w->what + " over " + std::to_string(w->comm->size) + " ranks timed out on rank " +
                                    std::to_string(w->comm->rank) + " after " +
                                    std::to_string(w->comm->timeout.count() / 1000) + " s: a peer is dead or stuck");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (w->host_out) cuda(cudaMemcpy(w->host_out, w->device_copy, w->bytes, cudaMemcpyDeviceToHost), "copying a result to the host");
    if (w->device_copy) cudaFree(w->device_copy);  // the stream is past it: the event completed
    cudaEventDestroy(w->done);
  }

 private:
  struct Staged {
    void* ptr = nullptr;   // what NCCL reads or writes
    void* host = nullptr;  // non-null: ptr is a staging copy of this host buffer
    size_t bytes = 0;
  };

  // Host memory goes through a device copy (in: copied now; out: copied back at wait).
  Staged stage(loom_comm* c, void* data, size_t bytes, bool copy_in) {
    if (!on_host(data)) return {data, nullptr, bytes};
    Staged s{nullptr, data, bytes};
    cuda(cudaMallocAsync(&s.ptr, std::max<size_t>(bytes, 1), c->stream), "staging a host buffer");
    if (copy_in && bytes) cuda(cudaMemcpyAsync(s.ptr, data, bytes, cudaMemcpyHostToDevice, c->stream), "staging a host buffer");
    return s;
  }
  // An input's staging copy, once the operation queued on the stream has read it.
  void release(loom_comm* c, Staged& s) {
    if (s.host) cudaFreeAsync(s.ptr, c->stream);
  }

  loom_work* finish(loom_comm* c, const std::string& what, const Staged& out, void* host_out, bool async) {
    settle(c, what);
    auto w = std::make_unique<loom_work>();
    w->comm = c;
    w->what = what;
    if (out.host) w->device_copy = out.ptr, w->host_out = host_out, w->bytes = out.bytes;  // host_out null: a send
    cuda(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming), "cudaEventCreate");
    cuda(cudaEventRecord(w->done, c->stream), "cudaEventRecord");
    if (async) return w.release();
    wait(w.release());
    return nullptr;
  }

  // A non-blocking communicator's call may still be in progress: poll it to a result.
  void settle(loom_comm* c, const std::string& what) {
    const auto start = Clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(c->comm, &state);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        ncclCommAbort(c->comm);
        throw Error(LOOM_FATAL, "nccl " + what + ": " + ncclGetErrorString(state));
      }
      if (Clock::now() - start > c->timeout) {
        ncclCommAbort(c->comm);
        throw Error(LOOM_FATAL, "nccl " + what + " timed out on rank " + std::to_string(c->rank) +
                                    ": a peer did not join within the timeout");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  void check(ncclResult_t r, loom_comm* c, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    if (c && c->comm) ncclCommAbort(c->comm);
    throw Error(LOOM_FATAL, std::string("nccl: ") + what + " failed: " + ncclGetErrorString(r));
  }
  [[noreturn]] static loom_work* refuse_p2p(const char* what, int peer) {
    throw Error(LOOM_BAD_CONFIG, std::string("nccl: ") + what + " rank " + std::to_string(peer) +
                                     ": point-to-point transfers (pipeline parallelism) are not built into the nccl "
                                     "plugin yet; run pipelines over gloo or mpi");
  }

  void put(const std::string& key, const void* data, size_t n) {
    loom::sdk::ErrorBox e(host_.raw());
    if (store_->set(store_->self, key.c_str(), data, n, e.get()) != LOOM_OK) e.raise("nccl: store set");
  }
  std::vector<char> fetch(const std::string& key) {
    loom::sdk::ErrorBox e(host_.raw());
    const void* p = nullptr;
    size_t n = 0;
    if (store_->get(store_->self, key.c_str(), &p, &n, e.get()) != LOOM_OK) e.raise("nccl: store get");
    return std::vector<char>(static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }

  loom::sdk::Host host_;
  const loom_store* store_ = nullptr;
  cudaStream_t stream_ = nullptr;  // every communicator's
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Nccl>())
