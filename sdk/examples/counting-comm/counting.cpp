// A comm plugin that wraps another one (the loom.plugins service): it creates the plugin
// named by its `inner` option with that plugin's own [plugins.<inner>] options, forwards every
// operation to it, and counts them. At the end it logs, with where it ran (loom.placement),
//   counting: rank R of W (host H, dp coordinate D): N collectives over <inner>, B bytes
//   all-reduced
// Each all_reduce is also a span on the run's trace (loom.trace). loom::sdk::Wrapped creates the
// inner plugin, releases it, and turns its failures into errors naming it; this file only forwards
// the comm table's 14 entries, which is why it is longer than 100 lines.
#include <atomic>
#include <loom/sdk.hpp>

namespace {

class Counting : public loom::sdk::CommPlugin {
 public:
  static constexpr loom_option_spec kOptions[] = {
      {"inner", LOOM_OPT_STRING, "\"gloo\"", "the comm plugin to wrap"},
      {nullptr, 0, nullptr, nullptr},
  };

  // The wrapped plugin must exist and be a comm plugin: `loom config check` says so, instead of
  // every rank failing at create().
  static void validate(const loom::sdk::Options& o, const loom::sdk::Host& host) {
    loom::sdk::Wrapped<loom_comm_v2>::check(host, o.str("inner"), LOOM_KIND_COMM,
                                            "[plugins.counting] inner");
  }
  static constexpr loom::sdk::About about{
      .name = "counting",
      .version = "0.0.1",
      .summary = "counts the collectives of another comm plugin it wraps",
      .options = kOptions,
      .validate = &validate,
      .capabilities = LOOM_COMM_P2P,  // its inner plugin's sends, as they are
      .services = LOOM_SERVICE_PLUGINS "|" LOOM_SERVICE_TRACE "|" LOOM_SERVICE_PLACEMENT};

  explicit Counting(const loom::sdk::Context& ctx)
      : host_(ctx.host), inner_(ctx.host, ctx.options.str("inner"), LOOM_KIND_COMM) {
    trace_ = host_.service<loom_trace>(LOOM_SERVICE_TRACE);
    if (const loom_placement* p = host_.placement())
      where_ = "rank " + std::to_string(p->rank) + " of " + std::to_string(p->world) + " (host " +
               p->host + ", dp coordinate " + std::to_string(p->axis_coord[LOOM_AXIS_DP]) + ")";
  }
  ~Counting() override {
    host_.info("counting: " + where_ + ": " + std::to_string(collectives_.load()) +
               " collectives over " + inner_.name() + ", " + std::to_string(reduced_bytes_.load()) +
               " bytes all-reduced");
  }

  loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) override {
    loom_comm* c = nullptr;
    inner_.call("init", &loom_comm_v2::init, &store, rank, size, timeout_ms, &c);
    return c;
  }
  loom_comm* split(loom_comm* parent, int color, int key) override {
    loom_comm* c = nullptr;
    inner_.call("split", &loom_comm_v2::split, parent, color, key, &c);
    return c;
  }
  void free_comm(loom_comm* c) override { inner_.table().free_comm(inner_.self(), c); }
  int rank(const loom_comm* c) override { return inner_.table().rank(inner_.self(), c); }
  int size(const loom_comm* c) override { return inner_.table().size(inner_.self(), c); }

  loom_work* all_reduce(loom_comm* c, loom_tensor& buf, loom_reduce_op op, bool async) override {
    reduced_bytes_ +=
        loom::sdk::numel(buf) * static_cast<int64_t>(loom::sdk::element_size(buf.dtype));
    const int64_t span = trace_ ? trace_->begin("counting all_reduce", "comm") : 0;
    loom_work* w = collective("all_reduce", &loom_comm_v2::all_reduce, async, c, &buf, op);
    if (trace_) trace_->end(span);
    return w;
  }
  loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                            loom_reduce_op op, bool async) override {
    return collective("reduce_scatter", &loom_comm_v2::reduce_scatter, async, c, &in, &out, op);
  }
  loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                        bool async) override {
    return collective("all_gather", &loom_comm_v2::all_gather, async, c, &in, &out);
  }
  loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) override {
    return collective("broadcast", &loom_comm_v2::broadcast, async, c, &buf, root);
  }
  loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out, const int64_t* sc,
                        const int64_t* rc, bool async) override {
    return collective("all_to_all", &loom_comm_v2::all_to_all, async, c, &in, &out, sc, rc);
  }
  loom_work* send(loom_comm* c, const loom_tensor& buf, int peer, int tag, bool async) override {
    loom_work* w = nullptr;
    inner_.call("send", &loom_comm_v2::send, c, &buf, peer, tag, async ? &w : nullptr);
    return w;
  }
  loom_work* recv(loom_comm* c, loom_tensor& buf, int peer, int tag, bool async) override {
    loom_work* w = nullptr;
    inner_.call("recv", &loom_comm_v2::recv, c, &buf, peer, tag, async ? &w : nullptr);
    return w;
  }
  void barrier(loom_comm* c) override {
    ++collectives_;
    inner_.call("barrier", &loom_comm_v2::barrier, c);
  }
  void wait(loom_work* w) override { inner_.call("wait", &loom_comm_v2::wait, w); }
  // Groups go through to a backend that has them (ABI 2.4; an older table is shorter).
  void group_start(loom_comm* c) override {
    if (has_groups()) inner_.call("group_start", &loom_comm_v2::group_start, c);
  }
  void group_end(loom_comm* c) override {
    if (has_groups()) inner_.call("group_end", &loom_comm_v2::group_end, c);
  }

 private:
  bool has_groups() const {
    const loom_comm_v2& t = inner_.table();
    return LOOM_HAS_FIELD(&t.base, loom_comm_v2, group_end) && t.group_start && t.group_end;
  }
  // A counted collective: the inner plugin's entry with the arguments, then the work handle.
  template <class Entry, class... Args>
  loom_work* collective(const char* what, Entry loom_comm_v2::*entry, bool async, Args... args) {
    ++collectives_;
    loom_work* w = nullptr;
    inner_.call(what, entry, args..., async ? &w : nullptr);
    return w;
  }

  loom::sdk::Host host_;
  loom::sdk::Wrapped<loom_comm_v2> inner_;
  std::string where_ = "rank ?";
  const loom_trace* trace_ = nullptr;
  std::atomic<int64_t> collectives_{0}, reduced_bytes_{0};
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Counting>())
