// A comm plugin that wraps another one (ABI 1.6 loom.plugins service): it creates the plugin
// named by its `inner` option with that plugin's own [plugins.<inner>] options, forwards every
// operation to it, and counts them. At the end it logs, with where it ran (loom.placement),
//   counting: rank R of W (host H, dp coordinate D): N collectives over <inner>, B bytes all-reduced
// Each all_reduce is also a span on the run's trace (loom.trace). It is longer than the other
// examples (144 lines) because a wrapper forwards each of the comm table's 15 entries.
#include <loom/sdk.hpp>

#include <atomic>

namespace {

class Counting : public loom::sdk::CommPlugin {
 public:
  static constexpr const char* name = "counting";
  static constexpr const char* version = "0.0.1";
  static constexpr const char* summary = "counts the collectives of another comm plugin it wraps";
  static const loom_option_spec* options() {
    static const loom_option_spec specs[] = {
        {"inner", LOOM_OPT_STRING, "\"gloo\"", "the comm plugin to wrap"},
        {nullptr, 0, nullptr, nullptr},
    };
    return specs;
  }

  // The wrapped plugin must exist and be a comm plugin: `loom config check` says so, instead of
  // every rank failing at create(). Without the service (an older runtime) create() finds out.
  static void validate(const loom::sdk::Options& o, const loom::sdk::Host& host) {
    const auto* plugins = host.service<loom_plugins>(LOOM_SERVICE_PLUGINS);
    if (!plugins) return;
    loom::sdk::ErrorBox e(host.raw());
    const loom_plugin* desc = nullptr;
    void* self = nullptr;
    if (plugins->create(o.str("inner").c_str(), LOOM_KIND_COMM, &desc, &self, e.get()) != LOOM_OK)
      e.raise("[plugins.counting] inner = \"" + o.str("inner") + "\"", LOOM_BAD_CONFIG);
    plugins->release(desc, self);
  }

  explicit Counting(const loom::sdk::Context& ctx) : host_(ctx.host), h_(ctx.host.raw()), inner_name_(ctx.options.str("inner")) {
    const auto* plugins = host_.service<loom_plugins>(LOOM_SERVICE_PLUGINS);
    if (!plugins) throw loom::sdk::Unavailable("counting needs the loom.plugins service (ABI 1.6, loom train)");
    loom::sdk::ErrorBox e(h_);
    const loom_plugin* desc = nullptr;
    if (plugins->create(inner_name_.c_str(), LOOM_KIND_COMM, &desc, &inner_self_, e.get()) != LOOM_OK)
      e.raise("counting: cannot create '" + inner_name_ + "'", LOOM_BAD_CONFIG);
    inner_ = reinterpret_cast<const loom_comm_v1*>(desc);
    plugins_ = plugins;
    trace_ = host_.service<loom_trace>(LOOM_SERVICE_TRACE);
    if (const loom_placement* p = host_.placement())
      where_ = "rank " + std::to_string(p->rank) + " of " + std::to_string(p->world) + " (host " + p->host +
               ", dp coordinate " + std::to_string(p->axis_coord[LOOM_AXIS_DP]) + ")";
  }
  ~Counting() override {
    host_.info("counting: " + where_ + ": " + std::to_string(collectives_.load()) + " collectives over " + inner_name_ +
               ", " + std::to_string(reduced_bytes_.load()) + " bytes all-reduced");
    plugins_->release(&inner_->base, inner_self_);
  }

  loom_comm* init(const loom_store& store, int rank, int size, int64_t timeout_ms) override {
    loom_comm* c = nullptr;
    call("init", inner_->init(inner_self_, &store, rank, size, timeout_ms, &c, e_()));
    return c;
  }
  loom_comm* split(loom_comm* parent, int color, int key) override {
    loom_comm* c = nullptr;
    call("split", inner_->split(inner_self_, parent, color, key, &c, e_()));
    return c;
  }
  void free_comm(loom_comm* c) override { inner_->free_comm(inner_self_, c); }
  int rank(const loom_comm* c) override { return inner_->rank(inner_self_, c); }
  int size(const loom_comm* c) override { return inner_->size(inner_self_, c); }

  loom_work* all_reduce(loom_comm* c, loom_tensor& buf, loom_reduce_op op, bool async) override {
    ++collectives_;
    reduced_bytes_ += loom::sdk::numel(buf) * static_cast<int64_t>(loom::sdk::element_size(buf.dtype));
    const int64_t span = trace_ ? trace_->begin("counting all_reduce", "comm") : 0;
    loom_work* w = nullptr;
    call("all_reduce", inner_->all_reduce(inner_self_, c, &buf, op, async ? &w : nullptr, e_()));
    if (trace_) trace_->end(span);
    return w;
  }
  loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out, loom_reduce_op op, bool async) override {
    ++collectives_;
    loom_work* w = nullptr;
    call("reduce_scatter", inner_->reduce_scatter(inner_self_, c, &in, &out, op, async ? &w : nullptr, e_()));
    return w;
  }
  loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out, bool async) override {
    ++collectives_;
    loom_work* w = nullptr;
    call("all_gather", inner_->all_gather(inner_self_, c, &in, &out, async ? &w : nullptr, e_()));
    return w;
  }
  loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) override {
    ++collectives_;
    loom_work* w = nullptr;
    call("broadcast", inner_->broadcast(inner_self_, c, &buf, root, async ? &w : nullptr, e_()));
    return w;
  }
  loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out, const int64_t* sc, const int64_t* rc,
                        bool async) override {
    ++collectives_;
    loom_work* w = nullptr;
    call("all_to_all", inner_->all_to_all(inner_self_, c, &in, &out, sc, rc, async ? &w : nullptr, e_()));
    return w;
  }
  loom_work* send(loom_comm* c, const loom_tensor& buf, int peer, int tag, bool async) override {
    loom_work* w = nullptr;
    call("send", inner_->send(inner_self_, c, &buf, peer, tag, async ? &w : nullptr, e_()));
    return w;
  }
  loom_work* recv(loom_comm* c, loom_tensor& buf, int peer, int tag, bool async) override {
    loom_work* w = nullptr;
    call("recv", inner_->recv(inner_self_, c, &buf, peer, tag, async ? &w : nullptr, e_()));
    return w;
  }
  void barrier(loom_comm* c) override {
    ++collectives_;
    call("barrier", inner_->barrier(inner_self_, c, e_()));
  }
  void wait(loom_work* w) override { call("wait", inner_->wait(inner_self_, w, e_())); }

 private:
  // One error sink per thread: the runtime calls from its own threads (DDP's overlap).
  loom_error* e_() {
    thread_local loom::sdk::ErrorBox box(loom::sdk::detail::host());
    return box.get();
  }
  void call(const char* what, loom_status s) {
    if (s != LOOM_OK) throw loom::sdk::Error(s, std::string("counting over ") + inner_name_ + ": " + what + ": " + h_->error_message(e_()));
  }

  loom::sdk::Host host_;
  const loom_host* h_;
  std::string inner_name_, where_ = "rank ?";
  const loom_plugins* plugins_ = nullptr;
  const loom_comm_v1* inner_ = nullptr;
  void* inner_self_ = nullptr;
  const loom_trace* trace_ = nullptr;
  std::atomic<int64_t> collectives_{0}, reduced_bytes_{0};
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Counting>())
