// mpi: the CPU communication backend over Open MPI (any MPI-3 library would do).
//
// An async operation is MPI's own nonblocking call (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// ...) issued on the calling thread; its handle wraps the MPI_Request plus what must happen when
// it completes (widening a bf16 result, dividing a sum into a mean). A synchronous one is the
// blocking call: Open MPI's blocking collectives use its tuned algorithms, its nonblocking ones
// the generic libnbc schedules, which measured up to 2x slower here at 64 MiB. MPI has no bf16
// type, so bf16 reductions are staged through fp32; data that is only moved travels as bytes. MPI
// ranks and communicators are MPI's: init checks that the launcher's rank and size agree with
// MPI_COMM_WORLD, split is MPI_Comm_split. The store is not needed.
//
// Failure: MPI has no timeouts. A rank that dies makes mpirun (or srun) stop the job and name
// the rank; this plugin never sees it. Progress: Open MPI advances nonblocking collectives only
// inside MPI calls, so each new operation also tests the ones still pending.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <loom/bf16.hpp>
#include <loom/sdk.hpp>
#include <memory>
#include <string>
#include <vector>

struct loom_work {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<float> staged;     // bf16 data widened to fp32 for a reduction
  std::function<void()> finish;  // runs once the request completed
  std::string what;              // "all_reduce over 4 ranks", for errors
};

namespace {

using loom::sdk::element_size;
using loom::sdk::Error;
using loom::sdk::numel;

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

Comm* as_comm(loom_comm* c) { return reinterpret_cast<Comm*>(c); }
const Comm* as_comm(const loom_comm* c) { return reinterpret_cast<const Comm*>(c); }
loom_comm* as_handle(Comm* c) { return reinterpret_cast<loom_comm*>(c); }

// MPI counts are int: refuse what does not fit rather than truncate.
int count_of(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw Error(LOOM_INTERNAL,
                std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int count");
  return static_cast<int>(n);
}

MPI_Op mpi_op(loom_reduce_op op) {
  switch (op) {
    case LOOM_REDUCE_MAX:
      return MPI_MAX;
    case LOOM_REDUCE_MIN:
      return MPI_MIN;
    default:
      return MPI_SUM;  // AVG divides after the sum
  }
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, len);
}

void check(int code, const std::string& what) {
  if (code != MPI_SUCCESS) throw Error(LOOM_FATAL, what + " failed: " + mpi_error(code));
}

// Where a reduction reads and writes: the tensor itself (f32, f64) or an fp32 staging copy (bf16).
struct ReduceBuffer {
  void* data;
  MPI_Datatype type;
};

class Mpi : public loom::sdk::CommPlugin {
 public:
  // Only a process that an MPI launcher started can join MPI_COMM_WORLD.
  static int score(const loom::sdk::Host&, std::string& why_not) {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
      if (std::getenv(v)) return 1;
    why_not =
        "not launched by an MPI launcher (no OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK): "
        "start the job with mpirun, or use comm = \"gloo\"";
    return 0;
  }
  static constexpr loom::sdk::About about{
      .name = "mpi",
      .version = "1.0.0",
      .summary = "CPU collectives over MPI (Open MPI), nonblocking",
      .score = &score,
      .capabilities = LOOM_COMM_P2P};

  explicit Mpi(const loom::sdk::Context&) {}

  // MPI_Finalize waits for every rank. A rank leaving on an error while the others sit in a
  // collective would wait forever (MPI has no timeouts), so it aborts the job instead, which
  // makes the launcher stop every rank and name this one.
  ~Mpi() override {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized || !owns_mpi_) return;
    if (std::uncaught_exceptions() > 0) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
  }

  loom_comm* init(const loom_store&, int rank, int size, int64_t) override {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owns_mpi_ = true;
    }
    // Errors come back as codes, so they become messages instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    auto* c = new Comm;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &c->comm), "MPI_Comm_dup");
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    if (c->rank != rank || c->size != size) {
      const std::string msg = "the launcher says rank " + std::to_string(rank) + " of " +
                              std::to_string(size) + " but MPI_COMM_WORLD says rank " +
                              std::to_string(c->rank) + " of " + std::to_string(c->size);
      free_comm(as_handle(c));
      throw loom::sdk::ConfigError(msg);
    }
    return as_handle(c);
  }

  loom_comm* split(loom_comm* parent, int color, int key) override {
    auto* c = new Comm;
    check(MPI_Comm_split(as_comm(parent)->comm, color, key, &c->comm), "MPI_Comm_split");
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    return as_handle(c);
  }

  void free_comm(loom_comm* handle) override {
    Comm* c = as_comm(handle);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    delete c;
  }
  int rank(const loom_comm* c) override { return as_comm(c)->rank; }
  int size(const loom_comm* c) override { return as_comm(c)->size; }

  loom_work* all_reduce(loom_comm* handle, loom_tensor& buf, loom_reduce_op flagged_op,
                        bool async) override {
    Comm* c = as_comm(handle);
    const auto op = static_cast<loom_reduce_op>(flagged_op & ~LOOM_COMM_PERSISTENT);
    const int64_t n = numel(buf);
    auto w = start("all_reduce", c);
    ReduceBuffer rb = reduce_buffer(buf, n, *w);
    const int count = count_of(n, "all_reduce");
    check(async ? MPI_Iallreduce(MPI_IN_PLACE, rb.data, count, rb.type, mpi_op(op), c->comm,
                                 &w->request)
                : MPI_Allreduce(MPI_IN_PLACE, rb.data, count, rb.type, mpi_op(op), c->comm),
          w->what);
    w->finish = [t = buf, n, op, size = c->size, wp = w.get()] {
      finish_reduce(t, 0, n, op, size, wp->staged);
    };
    return issue(std::move(w), async);
  }

  loom_work* reduce_scatter(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                            loom_reduce_op op, bool async) override {
    Comm* c = as_comm(handle);
    const int64_t n = numel(out);
    if (numel(in) != n * c->size)
      throw Error(LOOM_INTERNAL, "reduce_scatter: input must hold size x output elements");
    auto w = start("reduce_scatter", c);
    ReduceBuffer src = reduce_buffer(in, n * c->size, *w);
    // The result lands at the front of the (staged or output) buffer.
    void* dst = out.dtype == LOOM_BF16 ? static_cast<void*>(w->staged.data()) : out.data;
    if (out.dtype == LOOM_BF16 && in.dtype != LOOM_BF16)
      throw Error(LOOM_INTERNAL, "reduce_scatter: dtypes differ");
    const void* from = out.dtype == LOOM_BF16 ? MPI_IN_PLACE : src.data;
    const int count = count_of(n, "reduce_scatter");
    check(async ? MPI_Ireduce_scatter_block(from, dst, count, src.type, mpi_op(op), c->comm,
                                            &w->request)
                : MPI_Reduce_scatter_block(from, dst, count, src.type, mpi_op(op), c->comm),
          w->what);
    w->finish = [t = out, n, op, size = c->size, wp = w.get()] {
      finish_reduce(t, 0, n, op, size, wp->staged);
    };
    return issue(std::move(w), async);
  }

  loom_work* all_gather(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                        bool async) override {
    Comm* c = as_comm(handle);
    const int64_t bytes = numel(in) * static_cast<int64_t>(element_size(in.dtype));
    if (numel(out) != numel(in) * c->size)
      throw Error(LOOM_INTERNAL, "all_gather: output must hold size x input elements");
    auto w = start("all_gather", c);
    const int count = count_of(bytes, "all_gather");
    check(async ? MPI_Iallgather(in.data, count, MPI_BYTE, out.data, count, MPI_BYTE, c->comm,
                                 &w->request)
                : MPI_Allgather(in.data, count, MPI_BYTE, out.data, count, MPI_BYTE, c->comm),
          w->what);
    return issue(std::move(w), async);
  }

  loom_work* broadcast(loom_comm* handle, loom_tensor& buf, int root, bool async) override {
    Comm* c = as_comm(handle);
    const int64_t bytes = numel(buf) * static_cast<int64_t>(element_size(buf.dtype));
    auto w = start("broadcast", c);
    const int count = count_of(bytes, "broadcast");
    check(async ? MPI_Ibcast(buf.data, count, MPI_BYTE, root, c->comm, &w->request)
                : MPI_Bcast(buf.data, count, MPI_BYTE, root, c->comm),
          w->what);
    return issue(std::move(w), async);
  }

  loom_work* all_to_all(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                        const int64_t* send_counts, const int64_t* recv_counts,
                        bool async) override {
    Comm* c = as_comm(handle);
    const int64_t es = static_cast<int64_t>(element_size(in.dtype));
    std::vector<int> sc(c->size), rc(c->size), sd(c->size), rd(c->size);
    int64_t so = 0, ro = 0;
    for (int i = 0; i < c->size; ++i) {
      const int64_t s = send_counts ? send_counts[i] : numel(in) / c->size;
      const int64_t r = recv_counts ? recv_counts[i] : numel(out) / c->size;
      sc[i] = count_of(s * es, "all_to_all");
      rc[i] = count_of(r * es, "all_to_all");
      sd[i] = count_of(so, "all_to_all");
      rd[i] = count_of(ro, "all_to_all");
      so += s * es;
      ro += r * es;
    }
    auto w = start("all_to_all", c);
    // Ialltoallv reads the count arrays until completion: keep them with the handle.
    auto counts = std::make_shared<std::vector<int>>();
    for (auto* v : {&sc, &rc, &sd, &rd}) counts->insert(counts->end(), v->begin(), v->end());
    const int n = c->size;
    int* k = counts->data();
    check(async ? MPI_Ialltoallv(in.data, k, k + 2 * n, MPI_BYTE, out.data, k + n, k + 3 * n,
                                 MPI_BYTE, c->comm, &w->request)
                : MPI_Alltoallv(in.data, k, k + 2 * n, MPI_BYTE, out.data, k + n, k + 3 * n,
                                MPI_BYTE, c->comm),
          w->what);
    w->finish = [counts] {};
    return issue(std::move(w), async);
  }

  loom_work* send(loom_comm* handle, const loom_tensor& buf, int peer, int tag,
                  bool async) override {
    Comm* c = as_comm(handle);
    const int64_t bytes = numel(buf) * static_cast<int64_t>(element_size(buf.dtype));
    auto w = start("send to rank " + std::to_string(peer), c);
    check(MPI_Isend(buf.data, count_of(bytes, "send"), MPI_BYTE, peer, tag, c->comm, &w->request),
          w->what);
    return issue(std::move(w), async);
  }

  loom_work* recv(loom_comm* handle, loom_tensor& buf, int peer, int tag, bool async) override {
    Comm* c = as_comm(handle);
    const int64_t bytes = numel(buf) * static_cast<int64_t>(element_size(buf.dtype));
    auto w = start("recv from rank " + std::to_string(peer), c);
    check(MPI_Irecv(buf.data, count_of(bytes, "recv"), MPI_BYTE, peer, tag, c->comm, &w->request),
          w->what);
    return issue(std::move(w), async);
  }

  void barrier(loom_comm* handle) override { check(MPI_Barrier(as_comm(handle)->comm), "barrier"); }

  void wait(loom_work* work) override {
    std::unique_ptr<loom_work> w(work);
    pending_.remove(work);
    check(MPI_Wait(&w->request, MPI_STATUS_IGNORE), w->what);
    if (w->finish) w->finish();
  }

 private:
  static std::unique_ptr<loom_work> start(const std::string& op, const Comm* c) {
    auto w = std::make_unique<loom_work>();
    w->what = op + " over " + std::to_string(c->size) + " ranks on rank " + std::to_string(c->rank);
    return w;
  }

  // f32 and f64 reduce in place; bf16 is widened into the handle's fp32 staging buffer.
  static ReduceBuffer reduce_buffer(const loom_tensor& t, int64_t n, loom_work& w) {
    switch (t.dtype) {
      case LOOM_F32:
        return {t.data, MPI_FLOAT};
      case LOOM_F64:
        return {t.data, MPI_DOUBLE};
      case LOOM_BF16: {
        w.staged.resize(static_cast<size_t>(n));
        const auto* h = static_cast<const uint16_t*>(t.data);
        for (int64_t i = 0; i < n; ++i) w.staged[i] = loom::sdk::bf16_to_f32(h[i]);
        return {w.staged.data(), MPI_FLOAT};
      }
      default:
        throw Error(LOOM_INTERNAL, "mpi reduces f32, f64 and bf16 tensors only");
    }
  }

  // After a sum, AVG divides by the group size; a bf16 tensor gets its staged result back.
  static void finish_reduce(const loom_tensor& t, int64_t first, int64_t n, loom_reduce_op op,
                            int size, const std::vector<float>& staged) {
    if (t.dtype == LOOM_BF16) {
      auto* h = static_cast<uint16_t*>(t.data);
      for (int64_t i = 0; i < n; ++i) {
        float v = staged[first + i];
        if (op == LOOM_REDUCE_AVG) v /= static_cast<float>(size);
        h[i] = loom::sdk::f32_to_bf16(v);
      }
    } else if (op == LOOM_REDUCE_AVG && t.dtype == LOOM_F32) {
      auto* f = static_cast<float*>(t.data);
      for (int64_t i = 0; i < n; ++i) f[i] /= static_cast<float>(size);
    } else if (op == LOOM_REDUCE_AVG) {
      auto* d = static_cast<double*>(t.data);
      for (int64_t i = 0; i < n; ++i) d[i] /= static_cast<double>(size);
    }
  }

  // Nudges MPI's progress engine on everything still pending, then hands back or completes `w`.
  loom_work* issue(std::unique_ptr<loom_work> w, bool async) {
    for (loom_work* p : pending_) {
      int done = 0;
      MPI_Test(&p->request, &done,
               MPI_STATUS_IGNORE);  // a completed request becomes MPI_REQUEST_NULL
    }
    if (async) {
      pending_.push_back(w.get());
      return w.release();
    }
    wait(w.release());
    return nullptr;
  }

  bool owns_mpi_ = false;
  std::list<loom_work*> pending_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Mpi>())
