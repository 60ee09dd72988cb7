// Comm plugins that break the device contract on purpose, for the strict device to catch. Each
// wraps gloo (loom.plugins) and says it takes strict device memory (LOOM_COMM_DEVICES), so its
// all_reduce gets the device buffer itself:
//   LOOM_TEST_HOST_TOUCH ("hosttouch"): reads the buffer's first float on the host;
//   LOOM_TEST_NO_WAIT ("nowait"): scales the buffer on the compute stream, then copies it to the
//     host on the comm stream without waiting on the compute stream's event.
// Anything else is forwarded to gloo untouched.
#include <loom/sdk.hpp>

namespace {

const uint32_t kDevices = (1u << LOOM_DEVICE_CPU) | (1u << LOOM_DEVICE_STRICT);
const void* extension(const char* name) {
  return std::string(name) == LOOM_COMM_DEVICES ? &kDevices : nullptr;
}

class Misuse : public loom::sdk::CommPlugin {
 public:
#ifdef LOOM_TEST_HOST_TOUCH
  static constexpr const char* kName = "hosttouch";
#else
  static constexpr const char* kName = "nowait";
#endif
  static constexpr loom::sdk::About about{
      .name = kName,
      .version = "0.0.1",
      .summary = "breaks the device contract on purpose (tests)",
      .services = LOOM_SERVICE_PLUGINS "|" LOOM_SERVICE_DEVICE,
      .get_proc = &extension};

  explicit Misuse(const loom::sdk::Context& ctx)
      : inner_(ctx.host, "gloo", LOOM_KIND_COMM),
        ops_(ctx.host.service<loom_ops>(LOOM_SERVICE_DEVICE)) {}

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
    // The gradient bucket is device memory (ddp describes it as the host's: its descriptor's
    // device field is not to be trusted); the runtime's few scalars are host memory.
    if (ops_ && !ops_->host_reachable && loom::sdk::numel(buf) > 1024) misuse(buf);
    loom_work* w = nullptr;
    inner_.call("all_reduce", &loom_comm_v2::all_reduce, c, &buf, op, async ? &w : nullptr);
    return w;
  }
  loom_work* reduce_scatter(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                            loom_reduce_op op, bool async) override {
    loom_work* w = nullptr;
    inner_.call("reduce_scatter", &loom_comm_v2::reduce_scatter, c, &in, &out, op,
                async ? &w : nullptr);
    return w;
  }
  loom_work* all_gather(loom_comm* c, const loom_tensor& in, loom_tensor& out,
                        bool async) override {
    loom_work* w = nullptr;
    inner_.call("all_gather", &loom_comm_v2::all_gather, c, &in, &out, async ? &w : nullptr);
    return w;
  }
  loom_work* broadcast(loom_comm* c, loom_tensor& buf, int root, bool async) override {
    loom_work* w = nullptr;
    inner_.call("broadcast", &loom_comm_v2::broadcast, c, &buf, root, async ? &w : nullptr);
    return w;
  }
  loom_work* all_to_all(loom_comm* c, const loom_tensor& in, loom_tensor& out, const int64_t* sc,
                        const int64_t* rc, bool async) override {
    loom_work* w = nullptr;
    inner_.call("all_to_all", &loom_comm_v2::all_to_all, c, &in, &out, sc, rc,
                async ? &w : nullptr);
    return w;
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
  void barrier(loom_comm* c) override { inner_.call("barrier", &loom_comm_v2::barrier, c); }
  void wait(loom_work* w) override { inner_.call("wait", &loom_comm_v2::wait, w); }

 private:
  void misuse(const loom_tensor& buf) {
    float* device = static_cast<float*>(buf.data);
#ifdef LOOM_TEST_HOST_TOUCH
    volatile float first = device[0];  // the bug: a device pointer dereferenced on the host
    (void)first;
#else
    const int64_t n = loom::sdk::numel(buf);
    ops_->scale({device, LOOM_F32, 0}, 1.f, n);  // on the compute stream
    void* host = ops_->pinned_alloc(n * 4);
    ops_->set_stream(LOOM_STREAM_COMM);
    ops_->copy(host, device, n * 4);  // the bug: no wait_event on the compute stream's work first
    ops_->set_stream(LOOM_STREAM_COMPUTE);
    ops_->synchronize();
    ops_->pinned_free(host);
#endif
  }

  loom::sdk::Wrapped<loom_comm_v2> inner_;
  const loom_ops* ops_;
};

}  // namespace

LOOM_PLUGIN(loom::sdk::comm_plugin<Misuse>())
