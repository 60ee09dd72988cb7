// gloo: the CPU communication backend over gloo's TCP transport.
//
// all_reduce and broadcast use gloo's legacy algorithm classes (AllreduceRingChunked,
// BroadcastOneToAll, AllgatherRing), which run ~20x faster here than the newer gloo::allreduce
// and an order of magnitude faster than transfers over unbound buffers. reduce_scatter is a ring
// written here over the same pair buffers those classes use. all_to_all and send/recv, which have
// no legacy class, use unbound buffers. Each communicator
// owns a worker thread that runs its operations in issue order; async calls return a handle.
#include "communicator.hpp"
#include "disagreement.hpp"
#include "ring_reduce_scatter.hpp"

namespace {

class Gloo : public loom::sdk::CommPlugin {
 public:
  static constexpr loom_option_spec kOptions[] = {
      {"iface", LOOM_OPT_STRING, "\"\"",
       "network interface to bind (e.g. eth0); \"\" = GLOO_SOCKET_IFNAME (the runtime sets it from "
       "[parallel] interface "
       "or the route to MASTER_ADDR), else by hostname"},
      {"hostname", LOOM_OPT_STRING, "\"\"",
       "address to bind; \"\" = 127.0.0.1 when MASTER_ADDR is loopback or unset, else this host's "
       "name"},
      {"check_every", LOOM_OPT_INT, "64",
       "compare each collective's op and size with the ring neighbours for the first 64, then "
       "every N-th (1 = "
       "all, 0 = never): a size that differs between ranks is an error, not a silent partial sum"},
      {"record_groups", LOOM_OPT_STRING, "\"\"",
       "write every point-to-point group (group_start to group_end) and every lone send or receive "
       "to "
       "<this>.rank<N>, one line each, so a test can check that the groups pair as NCCL needs; "
       "\"\" = off"},
      {nullptr, 0, nullptr, nullptr},
  };
  static constexpr loom::sdk::About about{.name = "gloo",
                                          .version = "1.1.0",
                                          .summary = "CPU collectives over gloo's TCP transport",
                                          .options = kOptions,
                                          .capabilities = LOOM_COMM_P2P};

  explicit Gloo(const loom::sdk::Context& ctx)
      : iface_(ctx.options.str("iface")),
        hostname_(ctx.options.str("hostname")),
        check_every_(ctx.options.i64("check_every")),
        record_(ctx.options.str("record_groups")) {
    if (check_every_ < 0)
      throw loom::sdk::ConfigError("[plugins.gloo] check_every must be 0 or more");
    install_abort_handler();
  }

  loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) override {
    gloo::transport::tcp::attr attr;
    const char* env_iface = std::getenv("GLOO_SOCKET_IFNAME");
    if (!iface_.empty()) {
      attr.iface = iface_;
    } else if (!hostname_.empty()) {
      attr.hostname = hostname_;
    } else if (env_iface && *env_iface) {
      attr.iface = env_iface;
    } else {
      const char* master = std::getenv("MASTER_ADDR");
      std::string m = master ? master : "";
      if (m.empty() || m == "localhost" || m.rfind("127.", 0) == 0) {
        attr.hostname = "127.0.0.1";
      } else {
        char host[256] = {0};
        gethostname(host, sizeof host - 1);
        attr.hostname = host;
      }
    }
    device_ = gloo::transport::tcp::CreateDevice(attr);
    if (!record_.empty()) open_record(rank);
    return as_handle(
        connect(store, "loom/world/", rank, size, std::chrono::milliseconds(timeout_ms)));
  }

  loom_comm* split(loom_comm* parent, int color, int key) override {
    Comm* p = as_comm(parent);
    std::string base = p->id + "split" + std::to_string(p->splits++) + "/";
    // Publish (color, key) and read everyone's, through the store: a collective over `parent`.
    int64_t mine[2] = {color, key};
    StoreAdapter::put(*p->store, base + std::to_string(p->rank), mine, sizeof mine);
    std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
    for (int r = 0; r < p->size; ++r) {
      std::vector<char> d = StoreAdapter::fetch(*p->store, base + std::to_string(r));
      int64_t theirs[2];
      std::memcpy(theirs, d.data(), sizeof theirs);
      if (theirs[0] == color) members.push_back({theirs[1], r});
    }
    std::sort(members.begin(), members.end());
    int new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == p->rank) new_rank = static_cast<int>(i);
    return as_handle(connect(*p->store, base + "c" + std::to_string(color) + "/", new_rank,
                             static_cast<int>(members.size()), p->timeout));
  }

  void free_comm(loom_comm* c) override { delete as_comm(c); }
  int rank(const loom_comm* c) override { return as_comm(c)->rank; }
  int size(const loom_comm* c) override { return as_comm(c)->size; }

  loom_work* all_reduce(loom_comm* handle, loom_tensor& buf, loom_reduce_op flagged_op,
                        bool async) override {
    Comm* c = as_comm(handle);
    loom_tensor t = buf;
    const bool persistent = (flagged_op & LOOM_COMM_PERSISTENT) != 0;
    const auto op = static_cast<loom_reduce_op>(flagged_op & ~LOOM_COMM_PERSISTENT);
    return c->run(
        [c, t, op, persistent] {
          const int64_t n = numel(t);
          if (n == 0 || c->size == 1) return;
          if (t.dtype == LOOM_F64) {
            reduce_in_place(c, static_cast<double*>(t.data), n, op, persistent);
          } else if (t.dtype == LOOM_F32) {
            reduce_in_place(c, static_cast<float*>(t.data), n, op, persistent);
          } else {  // bf16: staged through fp32 so the sum does not lose bits on every hop
            std::vector<float> staged = to_f32(t, n);
            reduce_in_place(c, staged.data(), n, op, false);
            from_f32(staged, t, 0, n);
          }
        },
        async, describe("all_reduce", t));
  }

  // A pipelined ring over gloo's pair buffers (this gloo's ReduceScatterHalvingDoubling is 3x
  // slower than an all-reduce here, unbound buffers slower still): see RingReduceScatter.
  loom_work* reduce_scatter(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                            loom_reduce_op op, bool async) override {
    Comm* c = as_comm(handle);
    loom_tensor ti = in, to = out;
    return c->run(
        [c, ti, to, op] {
          const int n = c->size;
          const int64_t count = numel(to);
          if (numel(ti) != count * n)
            throw Error(LOOM_INTERNAL, "reduce_scatter: input must hold size x output elements");
          if (ti.dtype != LOOM_F32 && ti.dtype != LOOM_BF16)
            throw Error(LOOM_INTERNAL, "gloo reduces f32 and bf16 tensors only");
          std::vector<float>& result = c->work;  // the reduced block r, before dtype conversion
          result.resize(static_cast<size_t>(count));
          if (n == 1 || count == 0) {
            read_block(ti, count, c->rank, 0, count, result.data());
          } else {
            RingReduceScatter ring(c, ti, to, op, result.data());
            ring.run();
            if (ti.dtype == LOOM_F32) return;  // the ring left the result in `to`
          }
          if (op == LOOM_REDUCE_AVG)
            for (int64_t i = 0; i < count; ++i) result[i] /= static_cast<float>(n);
          from_f32(result, to, 0, count);
        },
        async, describe("reduce_scatter", ti));
  }

  // gloo's AllgatherRing over bytes (any dtype): n-1 steps of one block each.
  loom_work* all_gather(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                        bool async) override {
    Comm* c = as_comm(handle);
    loom_tensor ti = in, to = out;
    return c->run(
        [c, ti, to] {
          const int n = c->size, r = c->rank;
          const size_t es = element_size(ti.dtype), block = numel(ti) * es;
          if (static_cast<size_t>(numel(to)) * element_size(to.dtype) != block * n)
            throw Error(LOOM_INTERNAL, "all_gather: output must hold size x input elements");
          char* o = static_cast<char*>(to.data);
          if (block == 0) return;
          if (n == 1) {
            std::memcpy(o + r * block, ti.data, block);
            return;
          }
          gloo::AllgatherRing<char> algo(c->ctx, {static_cast<const char*>(ti.data)}, o,
                                         static_cast<int>(block));
          algo.run();
        },
        async, describe("all_gather", ti));
  }

  loom_work* broadcast(loom_comm* handle, loom_tensor& buf, int root, bool async) override {
    Comm* c = as_comm(handle);
    loom_tensor t = buf;
    return c->run(
        [c, t, root] {
          size_t bytes = numel(t) * element_size(t.dtype);
          if (c->size == 1 || bytes == 0) return;
          gloo::BroadcastOneToAll<char> algo(c->ctx, {static_cast<char*>(t.data)}, bytes, root, 0);
          algo.run();
        },
        async, describe("broadcast", t) + " from " + std::to_string(root));
  }

  // Pairwise: post a receive from and a send to every other rank, then wait for all of them.
  loom_work* all_to_all(loom_comm* handle, const loom_tensor& in, loom_tensor& out,
                        const int64_t* send_counts, const int64_t* recv_counts,
                        bool async) override {
    Comm* c = as_comm(handle);
    loom_tensor ti = in, to = out;
    const int n = c->size;
    std::vector<int64_t> sc(n), rc(n);
    for (int i = 0; i < n; ++i) {
      sc[i] = send_counts ? send_counts[i] : numel(ti) / n;
      rc[i] = recv_counts ? recv_counts[i] : numel(to) / n;
    }
    return c->run(
        [c, ti, to, sc, rc] {
          const int n = c->size, r = c->rank;
          const size_t es = element_size(ti.dtype);
          std::vector<size_t> soff(n + 1, 0), roff(n + 1, 0);
          for (int i = 0; i < n; ++i)
            soff[i + 1] = soff[i] + sc[i] * es, roff[i + 1] = roff[i] + rc[i] * es;
          char* o = static_cast<char*>(to.data);
          const char* s = static_cast<const char*>(ti.data);
          if (sc[r] != rc[r]) throw Error(LOOM_INTERNAL, "all_to_all: own block sizes differ");
          if (sc[r] > 0) std::memcpy(o + roff[r], s + soff[r], sc[r] * es);
          if (n == 1) return;
          // gloo's bound (legacy) pair buffers: its unbound-buffer path stalls here for ~10 ms
          // event-loop ticks per message (see docs/distributed.md).
          const int slot = static_cast<int>(c->ctx->nextSlot());
          std::vector<std::unique_ptr<gloo::transport::Buffer>> recvs, sends;
          for (int p = 0; p < n; ++p)
            if (p != r && rc[p] > 0)
              recvs.push_back(c->ctx->getPair(p)->createRecvBuffer(slot, o + roff[p], rc[p] * es));
          for (int p = 0; p < n; ++p)
            if (p != r && sc[p] > 0) {
              sends.push_back(c->ctx->getPair(p)->createSendBuffer(
                  slot, const_cast<char*>(s) + soff[p], sc[p] * es));
              sends.back()->send(0, sc[p] * es);
            }
          try {
            for (auto& b : recvs) b->waitRecv();
          } catch (...) {  // a send still queued must finish (or fail) before its buffer goes
            for (auto& b : sends) try {
                b->waitSend();
              } catch (...) {
              }
            throw;
          }
          for (auto& b : sends) b->waitSend();
        },
        async, describe("all_to_all", ti));
  }

  // Point-to-point transfers are posted at once, not queued: a receive that waits on the queue
  // would stop the matching send behind it from ever being posted.
  loom_work* send(loom_comm* handle, const loom_tensor& buf, int peer, int tag,
                  bool async) override {
    return post(as_comm(handle), buf, peer, tag, true, async);
  }

  loom_work* recv(loom_comm* handle, loom_tensor& buf, int peer, int tag, bool async) override {
    return post(as_comm(handle), buf, peer, tag, false, async);
  }

  // Groups only matter to a backend whose unmatched transfers block (NCCL): gloo's start at
  // once. Here a group is checked for nesting and, with record_groups, written down.
  void group_start(loom_comm* handle) override {
    Comm* c = as_comm(handle);
    if (c->grouped)
      throw Error(LOOM_INTERNAL, "gloo: group_start inside a group (groups do not nest)");
    c->grouped = true;
    c->group.clear();
  }

  void group_end(loom_comm* handle) override {
    Comm* c = as_comm(handle);
    if (!c->grouped) throw Error(LOOM_INTERNAL, "gloo: group_end without group_start");
    c->grouped = false;
    if (!c->group.empty()) record(*c, "group", c->group);
  }

  void barrier(loom_comm* handle) override {
    Comm* c = as_comm(handle);
    c->run(
        [c] {
          if (c->size == 1) return;
          gloo::BarrierAllToOne b(c->ctx);
          b.run();
        },
        false, "barrier");
  }

  void wait(loom_work* work) override {
    std::unique_ptr<loom_work> w(work);
    if (!w->p2p) {
      try {
        w->done.get();
      } catch (const std::future_error&) {
        throw Error(LOOM_FATAL, "the operation was abandoned: its communicator was freed first");
      }
      return;
    }
    try {
      if (w->is_send)
        w->p2p->waitSend();
      else
        w->p2p->waitRecv();
    } catch (const std::exception& e) {
      throw Error(LOOM_FATAL, std::string(w->is_send ? "send to" : "recv from") + " rank " +
                                  std::to_string(w->peer) + " failed on rank " +
                                  std::to_string(w->rank) + ": " + e.what());
    }
  }

 private:
  // Point-to-point slots live far above the ones nextSlot() hands to collectives.
  static constexpr int kTagSlot = 1 << 30;
  static constexpr uint32_t kSeqPeriod = 4096, kMaxTag = (1u << 29) / kSeqPeriod;

  loom_work* post(Comm* c, const loom_tensor& t, int peer, int tag, bool is_send, bool async) {
    c->drain();  // keep issue order: collectives queued before this transfer complete first
    size_t bytes = numel(t) * element_size(t.dtype);
    if (record_log_) {
      const std::string op = std::string(is_send ? "send " : "recv ") + std::to_string(peer) + " " +
                             std::to_string(tag) + " " + std::to_string(bytes);
      if (c->grouped)
        c->group += (c->group.empty() ? "" : ";") + op;
      else
        record(*c, "lone", op);
    }
    auto w = std::make_unique<loom_work>();
    if (bytes == 0) {  // both sides know the size: nothing to move
      std::promise<void> p;
      p.set_value();
      w->done = p.get_future();
    } else {
      if (tag < 0 || tag >= kMaxTag)
        throw Error(LOOM_INTERNAL, "gloo: point-to-point tag out of range");
      // A bound pair buffer per transfer, as all_to_all uses: gloo's unbound path stalls here.
      // A bound receive takes whatever arrives for its slot, so the slot is unique among the
      // transfers that could overlap: it carries the direction (a send and a receive with the
      // same tag between two ranks) and the message's number among those with this tag
      // (this step's message must not land in the last step's buffer, still registered).
      // Unlike gloo's unbound rendezvous, a bound pair reads its peer's messages in order: data
      // for a receive not yet posted holds up the pair until it is. The pipeline executor posts
      // each receive in its exchange, in the order the sender sends, so it never waits on that.
      const int from = is_send ? c->rank : peer, to = is_send ? peer : c->rank;
      const int direction = from < to ? 0 : 1;
      const uint32_t seq = c->p2p_sent[{peer, direction, tag}]++ % kSeqPeriod;
      const int slot =
          kTagSlot +
          static_cast<int>((static_cast<uint32_t>(tag) * 2 + direction) * kSeqPeriod + seq);
      auto& pair = c->ctx->getPair(peer);
      w->is_send = is_send;
      w->peer = peer;
      w->rank = c->rank;
      if (is_send) {
        w->p2p = pair->createSendBuffer(slot, t.data, bytes);
        w->p2p->send(0, bytes);
      } else {
        w->p2p = pair->createRecvBuffer(slot, t.data, bytes);
      }
    }
    if (async) return w.release();
    wait(w.release());
    return nullptr;
  }

  Comm* connect(const loom_store& store, const std::string& id, int rank, int size,
                std::chrono::milliseconds timeout) {
    auto c = std::make_unique<Comm>();
    c->store = &store;
    c->id = id;
    c->rank = rank;
    c->size = size;
    c->timeout = timeout;
    c->check_every = check_every_;
    c->device = device_;
    c->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    c->ctx->setTimeout(timeout);
    StoreAdapter adapter(store, id);
    try {
      c->ctx->connectFullMesh(adapter, c->device);
    } catch (const std::exception& e) {
      throw Error(LOOM_FATAL, "gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                  " could not connect: " + e.what());
    }
    agree_on_checks(*c);
    return c.release();
  }

  // Whether a collective's signature is checked is decided by its number on every rank alike;
  // ranks with another check_every would pair their checks with others' collectives and hang.
  static void agree_on_checks(const Comm& c) {
    const std::string key = c.id + "check_every";
    if (c.rank == 0) StoreAdapter::put(*c.store, key, &c.check_every, sizeof c.check_every);
    const std::vector<char> first = StoreAdapter::fetch(*c.store, key);
    int64_t theirs = 0;
    std::memcpy(&theirs, first.data(), std::min(first.size(), sizeof theirs));
    if (theirs != c.check_every)
      throw Error(LOOM_BAD_CONFIG, "[plugins.gloo] check_every is " +
                                       std::to_string(c.check_every) + " on rank " +
                                       std::to_string(c.rank) + " but " + std::to_string(theirs) +
                                       " on rank 0: every rank needs the same");
  }

  // record_groups: one line per group or lone transfer, "<communicator>\t<rank>\t<group|lone>\t
  // <op>;<op>..." with each op "send|recv <peer> <tag> <bytes>".
  void open_record(int world_rank) {
    const std::string path = record_ + ".rank" + std::to_string(world_rank);
    record_log_.reset(std::fopen(path.c_str(), "w"));
    if (!record_log_)
      throw Error(LOOM_BAD_CONFIG, "[plugins.gloo] record_groups: cannot write " + path);
  }
  void record(const Comm& c, const char* kind, const std::string& ops) {
    std::lock_guard<std::mutex> lock(record_mutex_);
    std::fprintf(record_log_.get(), "%s\t%d\t%s\t%s\n", c.id.c_str(), c.rank, kind, ops.c_str());
    std::fflush(record_log_.get());
  }

  std::string iface_, hostname_;
  int64_t check_every_;
  std::string record_;
  std::unique_ptr<FILE, int (*)(FILE*)> record_log_{nullptr, &std::fclose};
  std::mutex record_mutex_;
  std::shared_ptr<gloo::transport::Device> device_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Gloo>())
