// nccl: the comm slot over NCCL, for GPUs.
//
// Bootstrap: rank 0 of each new communicator makes an ncclUniqueId and publishes it through the
// runtime's store; the mesh groups come from ncclCommSplit. Communicators are non-blocking
// (config.blocking = 0) so that no call can hang: every call is settled by polling
// ncclCommGetAsyncError, and an operation not done past the timeout aborts its communicator
// (ncclCommAbort) and ends the process with an error naming the operation.
//
// Streams (the device contract, loom.device and loom.native_streams): every operation of every
// communicator runs on the device's comm stream, after an event of the compute stream, so it
// reads what the kernels before it wrote; waiting for it puts the compute stream behind its event,
// so the host does not block. One stream keeps the operations of different groups (ddp's buckets,
// the expert all-to-alls) in the program's issue order, the same on every rank, which NCCL needs
// against deadlock. Outside `loom train` (the bench) the plugin makes its own stream.
//
// Point-to-point: a send or receive between group_start and group_end goes to NCCL inside
// ncclGroupStart/End, so the matched pairs of a pipeline exchange or a ring step start together;
// a lone one is its own group. Tensors in host memory (the runtime's scalars, CPU runs of the
// bench) are staged through device memory, and the host waits for them: a host output is read
// only after its operation.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <loom/sdk.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct loom_comm {
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1, splits = 0;
  cudaStream_t stream = nullptr;
  std::chrono::milliseconds timeout{300000};
};

// An issued operation: the events after it, and a staged host output to copy back.
struct loom_work {
  cudaEvent_t done = nullptr;  // on the comm stream after the operation (owned by the work)
  loom_comm* comm = nullptr;
  std::string what;
  void* device_copy = nullptr;  // staging buffer (device), freed at wait
  void* staged_in = nullptr;    // an input's staging copy, freed once the operation is queued
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
    case LOOM_F32:
      return ncclFloat32;
    case LOOM_F64:
      return ncclFloat64;
    case LOOM_BF16:
      return ncclBfloat16;
    case LOOM_F16:
      return ncclFloat16;
    case LOOM_I32:
      return ncclInt32;
    case LOOM_I64:
      return ncclInt64;
    default:
      return ncclUint8;  // fp8 and bytes move as bytes (no reduction over them)
  }
}

ncclRedOp_t nccl_op(int32_t op) {
  switch (op & 0xff) {  // LOOM_COMM_PERSISTENT is a hint this plugin does not need
    case LOOM_REDUCE_AVG:
      return ncclAvg;
    case LOOM_REDUCE_MAX:
      return ncclMax;
    case LOOM_REDUCE_MIN:
      return ncclMin;
    default:
      return ncclSum;
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

// Operations in flight whose host nobody waits on (a device output the compute stream waits
// for): polled here, so a dead peer still ends the job instead of hanging the next host wait.
class Watchdog {
 public:
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  // `device`: the GPU the events belong to, which the thread makes its own (a thread without
  // one would open a context on GPU 0).
  void watch(int device, loom_comm* c, cudaEvent_t done, const std::string& what) {
    std::lock_guard<std::mutex> lock(m_);
    if (!thread_.joinable()) thread_ = std::thread([this, device] { run(device); });
    watched_.push_back(Watched{c, done, what, Clock::now()});
  }
  // Until no operation of `c` is watched (they finish, or the watchdog ends the process): before
  // the communicator goes.
  void forget(loom_comm* c) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(m_);
        bool left = false;
        for (const Watched& w : watched_) left = left || w.comm == c;
        if (!left) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  struct Watched {
    loom_comm* comm;
    cudaEvent_t done;
    std::string what;
    Clock::time_point since;
  };
  void run(int device) {
    cudaSetDevice(device);
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(m_);
      if (stop_) return;
      for (auto it = watched_.begin(); it != watched_.end();) {
        const cudaError_t e = cudaEventQuery(it->done);
        if (e == cudaSuccess) {
          cudaEventDestroy(it->done);
          it = watched_.erase(it);
          continue;
        }
        cudaGetLastError();  // a not-ready query leaves nothing for the next call to find
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(it->comm->comm, &async);
        const bool late = Clock::now() - it->since > it->comm->timeout;
        if ((e != cudaErrorNotReady) || (async != ncclSuccess && async != ncclInProgress) || late) {
          ncclCommAbort(it->comm->comm);  // the peers' operations with this rank fail too
          std::fprintf(
              stderr, "loom: error: nccl %s on rank %d of %d %s; exiting\n", it->what.c_str(),
              it->comm->rank, it->comm->size,
              late ? "did not complete within the timeout: a peer is dead or stuck"
                   : (std::string("failed: ") +
                      (e != cudaErrorNotReady ? cudaGetErrorString(e) : ncclGetErrorString(async)))
                         .c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }
        ++it;
      }
    }
  }
  std::mutex m_;
  std::list<Watched> watched_;
  std::thread thread_;
  bool stop_ = false;
};

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
  static constexpr loom::sdk::About about{
      .name = "nccl",
      .version = "1.1.0",
      .summary = "GPU collectives and point-to-point over NCCL, on the device's comm stream",
      .score = &score,
      .capabilities = LOOM_COMM_P2P,
      .services = LOOM_SERVICE_DEVICE "|" LOOM_SERVICE_NATIVE_STREAMS,
      .get_proc = &extension};

  explicit Nccl(const loom::sdk::Context& ctx) : host_(ctx.host) {
    const loom_ops* ops = host_.service<loom_ops>(LOOM_SERVICE_DEVICE);
    if (ops && ops->device.kind == LOOM_DEVICE_CUDA) dev_ = ops;
    streams_ = host_.service<loom_native_streams>(LOOM_SERVICE_NATIVE_STREAMS);
  }

  ~Nccl() override {
    if (own_stream_) cudaStreamDestroy(stream_);
  }

  loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) override {
    store_ = &store;
    if (!dev_) {  // in `loom train` the runtime chose this process's GPU (LOCAL_RANK % devices)
      int devices = 0;
      cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
      const char* local = std::getenv("LOCAL_RANK");
      cuda(cudaSetDevice((local ? std::atoi(local) : rank) % devices), "cudaSetDevice");
    }
    cuda(cudaGetDevice(&device_), "cudaGetDevice");
    ncclUniqueId id{};
    const std::string key = "nccl/world/id";
    if (rank == 0) {
      check(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
      put(key, &id, sizeof id);
    } else {
      std::vector<char> got = fetch(key);
      if (got.size() != sizeof id)
        throw Error(LOOM_FATAL, "nccl: the unique id in the store has the wrong size");
      std::memcpy(&id, got.data(), sizeof id);
    }
    auto* c = new loom_comm;
    c->rank = rank, c->size = size, c->timeout = std::chrono::milliseconds(timeout_ms);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&c->comm, size, id, rank, &config), c, "ncclCommInitRankConfig");
    settle(c, "initialising the world communicator");
    if (streams_ && dev_) {
      stream_ = static_cast<cudaStream_t>(streams_->stream(LOOM_STREAM_COMM));
    } else {
      cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      own_stream_ = true;
    }
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

  // The stream is the device's (or the plugin's), shared: its work is the device's to finish.
  void free_comm(loom_comm* c) override {
    if (!c) return;
    watchdog_.forget(c);
    if (c->comm) ncclCommDestroy(c->comm);
    delete c;
  }

  int rank(const loom_comm* c) override { return c->rank; }
  int size(const loom_comm* c) override { return c->size; }

  loom_work* all_reduce(loom_comm* c, loom_tensor& buf, loom_reduce_op op, bool async) override {
    after_compute();
    const size_t n = static_cast<size_t>(loom::sdk::numel(buf));
    Staged s = stage(c, buf.data, n * loom::sdk::element_size(buf.dtype), true);
    check(ncclAllReduce(s.ptr, s.ptr, n, nccl_type(buf.dtype), nccl_op(op), c->comm, c->stream), c,
          "ncclAllReduce");
    return finish(c, "all_reduce", {}, s, buf.data, async);
  }

  loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                            loom_reduce_op op, bool async) override {
    after_compute();
    const size_t n = static_cast<size_t>(loom::sdk::numel(out)),
                 es = loom::sdk::element_size(in.dtype);
    Staged si = stage(c, in.data, n * c->size * es, true), so = stage(c, out.data, n * es, false);
    check(
        ncclReduceScatter(si.ptr, so.ptr, n, nccl_type(in.dtype), nccl_op(op), c->comm, c->stream),
        c, "ncclReduceScatter");
    return finish(c, "reduce_scatter", si, so, out.data, async);
  }

  loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                        bool async) override {
    after_compute();
    const size_t n = static_cast<size_t>(loom::sdk::numel(in)),
                 es = loom::sdk::element_size(in.dtype);
    Staged si = stage(c, in.data, n * es, true), so = stage(c, out.data, n * c->size * es, false);
    check(ncclAllGather(si.ptr, so.ptr, n, nccl_type(in.dtype), c->comm, c->stream), c,
          "ncclAllGather");
    return finish(c, "all_gather", si, so, out.data, async);
  }

  loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) override {
    after_compute();
    const size_t n = static_cast<size_t>(loom::sdk::numel(buf));
    Staged s = stage(c, buf.data, n * loom::sdk::element_size(buf.dtype), true);
    check(ncclBroadcast(s.ptr, s.ptr, n, nccl_type(buf.dtype), root, c->comm, c->stream), c,
          "ncclBroadcast");
    return finish(c, "broadcast", {}, s, buf.data, async);
  }

  // A grouped send to and receive from every peer, blocks packed in rank order.
  loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                        const int64_t* send_counts, const int64_t* recv_counts,
                        bool async) override {
    after_compute();
    const size_t es = loom::sdk::element_size(in.dtype);
    std::vector<size_t> sc(c->size), rc(c->size), so(c->size + 1, 0), ro(c->size + 1, 0);
    for (int p = 0; p < c->size; ++p) {
      sc[p] =
          static_cast<size_t>(send_counts ? send_counts[p] : loom::sdk::numel(in) / c->size) * es;
      rc[p] =
          static_cast<size_t>(recv_counts ? recv_counts[p] : loom::sdk::numel(out) / c->size) * es;
      so[p + 1] = so[p] + sc[p], ro[p + 1] = ro[p] + rc[p];
    }
    Staged si = stage(c, in.data, so[c->size], true), sr = stage(c, out.data, ro[c->size], false);
    check(ncclGroupStart(), c, "ncclGroupStart");
    for (int p = 0; p < c->size; ++p) {
      if (sc[p])
        check(ncclSend(static_cast<char*>(si.ptr) + so[p], sc[p], ncclUint8, p, c->comm, c->stream),
              c, "ncclSend");
      if (rc[p])
        check(ncclRecv(static_cast<char*>(sr.ptr) + ro[p], rc[p], ncclUint8, p, c->comm, c->stream),
              c, "ncclRecv");
    }
    check(ncclGroupEnd(), c, "ncclGroupEnd");
    return finish(c, "all_to_all", si, sr, out.data, async);
  }

  // Inside a group the transfer joins it (ncclGroupEnd starts them all); alone it is its own.
  loom_work* send(loom_comm* c, const loom_tensor& buf, int peer, int, bool async) override {
    after_compute();
    const size_t bytes =
        static_cast<size_t>(loom::sdk::numel(buf)) * loom::sdk::element_size(buf.dtype);
    Staged s = stage(c, buf.data, bytes, true);
    point_to_point(
        c, [&] { return ncclSend(s.ptr, bytes, ncclUint8, peer, c->comm, c->stream); }, "ncclSend");
    return finish(c, "send to rank " + std::to_string(peer), s, {}, nullptr, async);
  }

  loom_work* recv(loom_comm* c, loom_tensor& buf, int peer, int, bool async) override {
    after_compute();
    const size_t bytes =
        static_cast<size_t>(loom::sdk::numel(buf)) * loom::sdk::element_size(buf.dtype);
    Staged s = stage(c, buf.data, bytes, false);
    point_to_point(
        c, [&] { return ncclRecv(s.ptr, bytes, ncclUint8, peer, c->comm, c->stream); }, "ncclRecv");
    return finish(c, "recv from rank " + std::to_string(peer), {}, s, buf.data, async);
  }

  // NCCL's groups are per thread, not per communicator: so is this one.
  void group_start(loom_comm* c) override {
    if (grouped_)
      throw Error(LOOM_INTERNAL, "nccl: group_start inside a group (groups do not nest)");
    grouped_ = true;
    check(ncclGroupStart(), c, "ncclGroupStart");
  }

  void group_end(loom_comm* c) override {
    if (!grouped_) throw Error(LOOM_INTERNAL, "nccl: group_end without group_start");
    grouped_ = false;
    check(ncclGroupEnd(), c, "ncclGroupEnd");
    for (loom_work* w : in_group_) settle(w->comm, "a group of sends and receives");
    for (loom_work* w : in_group_) queued(*w);
    in_group_.clear();
  }

  void barrier(loom_comm* c) override {
    float one = 1.f;
    loom_tensor t = loom::sdk::flat_tensor(&one, LOOM_F32, 1);
    all_reduce(c, t, LOOM_REDUCE_SUM, false);
  }

  // A device output: the compute stream waits for the operation, the host does not (the
  // watchdog polls it). A host output: the host waits, polling for NCCL errors and the timeout.
  void wait(loom_work* work) override {
    std::unique_ptr<loom_work> w(work);
    if (!w->host_out && dev_ && streams_) {
      auto* compute = static_cast<cudaStream_t>(streams_->stream(LOOM_STREAM_COMPUTE));
      cuda(cudaStreamWaitEvent(compute, w->done, 0),
           "ordering the compute stream after " + w->what);
      release(w->comm, w->device_copy);
      watchdog_.watch(device_, w->comm, w->done, w->what);  // it destroys the event when done
      return;
    }
    poll(*w);
    if (w->host_out) {
      cuda(cudaMemcpyAsync(w->host_out, w->device_copy, w->bytes, cudaMemcpyDeviceToHost,
                           w->comm->stream),
           "copying a result to the host");
      cudaEvent_t copied = w->done;
      cuda(cudaEventRecord(copied, w->comm->stream), "cudaEventRecord");
      poll(*w);
    }
    release(w->comm, w->device_copy);
    cudaEventDestroy(w->done);
  }

 private:
  struct Staged {
    void* ptr = nullptr;   // what NCCL reads or writes
    void* host = nullptr;  // non-null: ptr is a staging copy of this host buffer
    size_t bytes = 0;
  };

  // The comm stream starts after the compute stream's work so far (the kernels that wrote what
  // this operation reads).
  void after_compute() {
    if (!dev_) return;
    const int64_t compute = dev_->record_event();
    dev_->set_stream(LOOM_STREAM_COMM);
    dev_->wait_event(compute);
    dev_->set_stream(LOOM_STREAM_COMPUTE);
  }

  template <class Call>
  void point_to_point(loom_comm* c, Call call, const char* what) {
    if (!grouped_) check(ncclGroupStart(), c, "ncclGroupStart");
    check(call(), c, what);
    if (!grouped_) check(ncclGroupEnd(), c, "ncclGroupEnd");
  }

  // Host memory goes through a device copy (in: copied now, stream-ordered; out: copied back at
  // wait). Device memory passes.
  Staged stage(loom_comm* c, void* data, size_t bytes, bool copy_in) {
    if (!on_host(data)) return {data, nullptr, bytes};
    Staged s{nullptr, data, bytes};
    cuda(cudaMallocAsync(&s.ptr, std::max<size_t>(bytes, 1), c->stream), "staging a host buffer");
    if (copy_in && bytes)
      cuda(cudaMemcpyAsync(s.ptr, data, bytes, cudaMemcpyHostToDevice, c->stream),
           "staging a host buffer");
    return s;
  }
  void release(loom_comm* c, void* device_copy) {
    if (device_copy) cudaFreeAsync(device_copy, c->stream);
  }

  // `in`: a staged input, freed once the operation is on the stream; `out`: the output. Inside a
  // group NCCL queues nothing until group_end, so the events wait for it too.
  loom_work* finish(loom_comm* c, const std::string& what, const Staged& in, const Staged& out,
                    void* host_out, bool async) {
    auto w = std::make_unique<loom_work>();
    w->comm = c;
    w->what = what;
    if (in.host) w->staged_in = in.ptr;
    if (out.host) w->device_copy = out.ptr, w->host_out = host_out, w->bytes = out.bytes;
    cuda(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming), "cudaEventCreate");
    if (grouped_) {
      if (!async)
        throw Error(LOOM_INTERNAL,
                    "nccl: " + what + " waited for inside a group, which starts only at group_end");
      in_group_.push_back(w.get());
      return w.release();
    }
    settle(c, what);
    queued(*w);
    if (async) return w.release();
    wait(w.release());
    return nullptr;
  }

  // The operation is on the comm stream: its staged input may go, and its event follows it.
  void queued(loom_work& w) {
    release(w.comm, w.staged_in);
    w.staged_in = nullptr;
    cuda(cudaEventRecord(w.done, w.comm->stream), "cudaEventRecord");
  }

  // The host's wait for an operation: its event polled with NCCL's errors and the timeout.
  void poll(loom_work& w) {
    const auto start = Clock::now();
    for (;;) {
      const cudaError_t e = cudaEventQuery(w.done);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda(e, "nccl " + w.what);
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(w.comm->comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(w.comm->comm);
        throw Error(LOOM_FATAL,
                    "nccl " + w.what + " failed on rank " + std::to_string(w.comm->rank) + ": " +
                        ncclGetErrorString(async) + " (" + ncclGetLastError(nullptr) + ")");
      }
      if (Clock::now() - start > w.comm->timeout) {
        ncclCommAbort(w.comm->comm);
        throw Error(LOOM_FATAL, "nccl " + w.what + " over " + std::to_string(w.comm->size) +
                                    " ranks timed out on rank " + std::to_string(w.comm->rank) +
                                    " after " + std::to_string(w.comm->timeout.count() / 1000) +
                                    " s: a peer is dead or stuck");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
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

  void put(const std::string& key, const void* data, size_t n) {
    loom::sdk::ErrorBox e(host_.raw());
    if (store_->set(store_->self, key.c_str(), data, n, e.get()) != LOOM_OK)
      e.raise("nccl: store set");
  }
  std::vector<char> fetch(const std::string& key) {
    loom::sdk::ErrorBox e(host_.raw());
    const void* p = nullptr;
    size_t n = 0;
    if (store_->get(store_->self, key.c_str(), &p, &n, e.get()) != LOOM_OK)
      e.raise("nccl: store get");
    return std::vector<char>(static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }

  loom::sdk::Host host_;
  const loom_store* store_ = nullptr;
  const loom_ops* dev_ = nullptr;                 // the CUDA op table, in `loom train`
  const loom_native_streams* streams_ = nullptr;  // its streams
  cudaStream_t stream_ = nullptr;                 // every communicator's: the device's comm stream
  bool own_stream_ = false;
  int device_ = 0;                    // this process's GPU
  bool grouped_ = false;              // inside group_start .. group_end
  std::vector<loom_work*> in_group_;  // issued in the open group: queued at group_end
  Watchdog watchdog_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Nccl>())
