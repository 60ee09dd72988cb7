/* A comm plugin with collectives but no point-to-point transfers (send and recv are NULL): the
 * runtime must refuse it for layouts that need send/recv (context parallelism's ring) before any
 * rank starts. It is never initialised. Built with LOOM_TEST_UNDECLARED it is "undeclared": send
 * and recv are there but LOOM_COMM_P2P is not declared, which the runtime refuses the same way,
 * naming the plugin. */
#include <loom/plugin.h>

static loom_status create(const loom_host* h, const loom_options* o, void** self, loom_error* e) {
  (void)h;
  (void)o;
  (void)e;
  *self = 0;
  return LOOM_OK;
}
static void destroy(void* self) { (void)self; }

/* Never run: the runtime refuses the plugin first. Present because a comm table must have them. */
static loom_status init(void* self, const loom_store* store, int32_t rank, int32_t size,
                        int64_t timeout_ms, loom_comm** out, loom_error* e) {
  (void)self;
  (void)store;
  (void)rank;
  (void)size;
  (void)timeout_ms;
  (void)out;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status split(void* self, loom_comm* parent, int32_t color, int32_t key, loom_comm** out,
                         loom_error* e) {
  (void)self;
  (void)parent;
  (void)color;
  (void)key;
  (void)out;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static void free_comm(void* self, loom_comm* comm) {
  (void)self;
  (void)comm;
}
static int32_t rank(void* self, const loom_comm* comm) {
  (void)self;
  (void)comm;
  return 0;
}
static int32_t size(void* self, const loom_comm* comm) {
  (void)self;
  (void)comm;
  return 1;
}
static loom_status all_reduce(void* self, loom_comm* comm, loom_tensor* buf, int32_t op,
                              loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)buf;
  (void)op;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status reduce_scatter(void* self, loom_comm* comm, const loom_tensor* in,
                                  loom_tensor* out, int32_t op, loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)in;
  (void)out;
  (void)op;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status all_gather(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                              loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)in;
  (void)out;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status broadcast(void* self, loom_comm* comm, loom_tensor* buf, int32_t root,
                             loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)buf;
  (void)root;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status all_to_all(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                              const int64_t* send_counts, const int64_t* recv_counts,
                              loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)in;
  (void)out;
  (void)send_counts;
  (void)recv_counts;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status barrier(void* self, loom_comm* comm, loom_error* e) {
  (void)self;
  (void)comm;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status wait_for(void* self, loom_work* work, loom_error* e) {
  (void)self;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}

#ifdef LOOM_TEST_UNDECLARED
static loom_status send(void* self, loom_comm* comm, const loom_tensor* buf, int32_t peer,
                        int32_t tag, loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)buf;
  (void)peer;
  (void)tag;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
static loom_status recv(void* self, loom_comm* comm, loom_tensor* buf, int32_t peer, int32_t tag,
                        loom_work** work, loom_error* e) {
  (void)self;
  (void)comm;
  (void)buf;
  (void)peer;
  (void)tag;
  (void)work;
  (void)e;
  return LOOM_UNAVAILABLE;
}
#define NAME "undeclared"
#define SUMMARY "send and recv without LOOM_COMM_P2P"
#define P2P .send = send, .recv = recv,
#else
#define NAME "nop2p"
#define SUMMARY "collectives only, no send/recv"
#define P2P
#endif

static const loom_comm_v2 table = {
    .base = {.v = {LOOM_ABI_MAJOR, LOOM_ABI_MINOR, sizeof(loom_comm_v2)},
             .kind = LOOM_KIND_COMM,
             .name = NAME,
             .version = "0.0.1",
             .summary = SUMMARY,
             .create = create,
             .destroy = destroy},
    .init = init,
    .split = split,
    .free_comm = free_comm,
    .rank = rank,
    .size = size,
    .all_reduce = all_reduce,
    .reduce_scatter = reduce_scatter,
    .all_gather = all_gather,
    .broadcast = broadcast,
    .all_to_all = all_to_all,
    P2P.barrier = barrier,
    .wait = wait_for};
static const loom_plugin* const list[] = {&table.base};

LOOM_EXPORT loom_status loom_plugin_entry_v3(const loom_host* host, const loom_plugin* const** out,
                                             size_t* count, loom_error* err) {
  (void)host;
  (void)err;
  *out = list;
  *count = 1;
  return LOOM_OK;
}
