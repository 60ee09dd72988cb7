#include "distributed/device_staging.hpp"

#include <deque>
#include <memory>
#include <vector>

#include "loader/host.hpp"
#include "tensor/tensor.hpp"

namespace loom::dist {

namespace {

StagedComm& of(void* self) { return *static_cast<StagedComm*>(self); }

int64_t bytes_of(const loom_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n * static_cast<int64_t>(dtype_size(static_cast<loom_dtype>(t->dtype)));
}

// This thread's work goes to the comm stream while it lives, back to compute after, also when
// a copy throws.
class OnCommStream {
 public:
  explicit OnCommStream(const loom_ops_v2* ops) : ops_(ops) { ops_->set_stream(LOOM_STREAM_COMM); }
  ~OnCommStream() { ops_->set_stream(LOOM_STREAM_COMPUTE); }
  OnCommStream(const OnCommStream&) = delete;
  OnCommStream& operator=(const OnCommStream&) = delete;

 private:
  const loom_ops_v2* ops_;
};

// One operation's host copies of its device tensors.
class Staging {
 public:
  // `kept`: host copies that outlive the operation, one per device buffer, for a buffer the
  // backend will see again (LOOM_COMM_PERSISTENT: gloo keeps its algorithm per pointer).
  Staging(const loom_ops_v2* ops, PinnedCache* kept) : ops_(ops), kept_(kept) {}
  // A copy back may still read the host copies: they are freed once it has run. After a failure
  // (of the device, or of the backend, which may still write them) they are left allocated.
  ~Staging() {
    bool freeing = false;
    for (const Copy& c : copies_) freeing = freeing || !c.kept;
    if (!freeing || abandoned_) return;
    try {
      if (copied_back_ >= 0) ops_->sync_event(copied_back_);
    } catch (const std::exception&) {
      return;
    }
    for (const Copy& c : copies_)
      if (!c.kept) ops_->pinned_free(c.host.data);
  }
  // The operation failed: nothing may free what the backend or a copy may still use.
  void abandon() { abandoned_ = true; }

  // A tensor the backend reads: a host copy of it. Host tensors pass through.
  loom_tensor* in(const loom_tensor* t) { return stage(const_cast<loom_tensor*>(t), true, false); }
  // A tensor the backend writes (and reads, when `read_too`).
  loom_tensor* out(loom_tensor* t, bool read_too) { return stage(t, read_too, true); }

  // The copies to the host, on the comm stream after the compute stream's work so far; the
  // host waits for them before the backend reads the copies.
  void ready() {
    if (copies_.empty()) return;
    const int64_t compute_done = ops_->record_event();
    OnCommStream comm(ops_);
    ops_->wait_event(compute_done);  // also orders finish()'s copies back after the kernels' uses
    bool reads = false;
    for (const Copy& c : copies_)
      if (c.read) {
        ops_->copy(c.host.data, c.device.data, bytes_of(&c.device));
        reads = true;
      }
    if (reads) ops_->sync_event(ops_->record_event());  // a receive alone needs no host wait
  }

  // What the backend wrote goes back on the comm stream; the compute stream's next kernels wait.
  void finish() {
    bool any = false;
    for (const Copy& c : copies_) any = any || c.written;
    if (!any) return;
    {
      OnCommStream comm(ops_);
      for (const Copy& c : copies_)
        if (c.written) ops_->copy(c.device.data, c.host.data, bytes_of(&c.device));
      copied_back_ = ops_->record_event();
    }
    ops_->wait_event(copied_back_);
  }

 private:
  // The descriptors are copied: the caller's may be gone before an issued operation is waited
  // for (only the memory must live that long).
  struct Copy {
    loom_tensor device;
    loom_tensor host;
    bool read, written, kept;
  };

  loom_tensor* stage(loom_tensor* t, bool read, bool written) {
    // By address, not by the descriptor's device: a plugin may have described device memory
    // as the host's.
    const TensorAllocator& device = tensor_allocator();
    if (!t || !device.owns || !device.owns(t->data)) return t;
    for (Copy& c : copies_)  // in place (all_reduce, broadcast): one copy, both ways
      if (c.device.data == t->data) {
        c.read = c.read || read, c.written = c.written || written;
        return &c.host;
      }
    Copy c{*t, *t, read, written, kept_ != nullptr};
    c.host.data = kept_ ? kept_->get(ops_, t->data, bytes_of(t)) : ops_->pinned_alloc(bytes_of(t));
    c.host.device = {LOOM_DEVICE_CPU, 0};
    copies_.push_back(c);
    return &copies_.back().host;
  }

  const loom_ops_v2* ops_;
  PinnedCache* kept_;
  std::deque<Copy> copies_;
  int64_t copied_back_ = -1;  // the event after the copies back, once finish() has issued them
  bool abandoned_ = false;    // stable addresses: the backend holds the host descriptors
};

// An issued operation and the copies it goes back through when waited for.
struct StagedWork {
  loom_work* inner;
  std::unique_ptr<Staging> staging;
};

// Issues `call` on the staged tensors: to completion (work NULL: then copies back), or as an
// operation whose wait copies back.
// A refused copy (the strict device's hazard check) becomes the operation's error, as the C
// boundary requires, instead of an exception through it.
template <class Body>
loom_status guarded(loom_error* err, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return plugins::host().set_error(
        err, LOOM_FATAL, (std::string("staging through host memory: ") + e.what()).c_str());
  }
}

template <class Call>
loom_status issue(std::unique_ptr<Staging> st, loom_work** work, loom_error* err, Call call) {
  return guarded(err, [&] {
    st->ready();
    if (!work) {
      const loom_status s = call(nullptr);
      if (s == LOOM_OK) st->finish();
      if (s != LOOM_OK) st->abandon();
      return s;
    }
    loom_work* inner = nullptr;
    const loom_status s = call(&inner);
    if (s == LOOM_OK) *work = reinterpret_cast<loom_work*>(new StagedWork{inner, std::move(st)});
    if (s != LOOM_OK) st->abandon();
    return s;
  });
}

loom_status all_reduce(void* self, loom_comm* comm, loom_tensor* buf, int32_t op, loom_work** work,
                       loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, (op & LOOM_COMM_PERSISTENT) ? &s.kept : nullptr);
  loom_tensor* b = st->out(buf, true);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->all_reduce(s.inner_self, comm, b, op, w, err);
  });
}

loom_status reduce_scatter(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                           int32_t op, loom_work** work, loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  const loom_tensor* i = st->in(in);
  loom_tensor* o = st->out(out, false);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->reduce_scatter(s.inner_self, comm, i, o, op, w, err);
  });
}

loom_status all_gather(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                       loom_work** work, loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  const loom_tensor* i = st->in(in);
  loom_tensor* o = st->out(out, false);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->all_gather(s.inner_self, comm, i, o, w, err);
  });
}

loom_status broadcast(void* self, loom_comm* comm, loom_tensor* buf, int32_t root, loom_work** work,
                      loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  loom_tensor* b = st->out(buf, true);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->broadcast(s.inner_self, comm, b, root, w, err);
  });
}

loom_status all_to_all(void* self, loom_comm* comm, const loom_tensor* in, loom_tensor* out,
                       const int64_t* send_counts, const int64_t* recv_counts, loom_work** work,
                       loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  const loom_tensor* i = st->in(in);
  loom_tensor* o = st->out(out, false);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->all_to_all(s.inner_self, comm, i, o, send_counts, recv_counts, w, err);
  });
}

loom_status send(void* self, loom_comm* comm, const loom_tensor* buf, int32_t peer, int32_t tag,
                 loom_work** work, loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  const loom_tensor* b = st->in(buf);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->send(s.inner_self, comm, b, peer, tag, w, err);
  });
}

loom_status recv(void* self, loom_comm* comm, loom_tensor* buf, int32_t peer, int32_t tag,
                 loom_work** work, loom_error* err) {
  StagedComm& s = of(self);
  auto st = std::make_unique<Staging>(s.ops, nullptr);
  loom_tensor* b = st->out(buf, false);
  return issue(std::move(st), work, err, [&](loom_work** w) {
    return s.inner->recv(s.inner_self, comm, b, peer, tag, w, err);
  });
}

loom_status wait(void* self, loom_work* work, loom_error* err) {
  StagedComm& s = of(self);
  std::unique_ptr<StagedWork> sw(reinterpret_cast<StagedWork*>(work));
  const loom_status st = s.inner->wait(s.inner_self, sw->inner, err);
  if (st != LOOM_OK) {
    sw->staging->abandon();
    return st;
  }
  return guarded(err, [&] {
    sw->staging->finish();
    return LOOM_OK;
  });
}

// The calls without tensors go straight through.
loom_status init(void* self, const loom_store* store, int32_t rank, int32_t size,
                 int64_t timeout_ms, loom_comm** out, loom_error* err) {
  return of(self).inner->init(of(self).inner_self, store, rank, size, timeout_ms, out, err);
}
loom_status split(void* self, loom_comm* parent, int32_t color, int32_t key, loom_comm** out,
                  loom_error* err) {
  return of(self).inner->split(of(self).inner_self, parent, color, key, out, err);
}
void free_comm(void* self, loom_comm* c) { of(self).inner->free_comm(of(self).inner_self, c); }
int32_t rank_of(void* self, const loom_comm* c) {
  return of(self).inner->rank(of(self).inner_self, c);
}
int32_t size_of(void* self, const loom_comm* c) {
  return of(self).inner->size(of(self).inner_self, c);
}
loom_status barrier(void* self, loom_comm* c, loom_error* err) {
  return of(self).inner->barrier(of(self).inner_self, c, err);
}
loom_status group_start(void* self, loom_comm* c, loom_error* err) {
  return of(self).inner->group_start(of(self).inner_self, c, err);
}
loom_status group_end(void* self, loom_comm* c, loom_error* err) {
  return of(self).inner->group_end(of(self).inner_self, c, err);
}

}  // namespace

bool comm_takes_device(const loom_plugin& plugin, loom_device device) {
  if (device.kind == LOOM_DEVICE_CPU) return true;
  const void* mask = LOOM_HAS_FIELD(&plugin, loom_plugin, get_proc) && plugin.get_proc
                         ? plugin.get_proc(LOOM_COMM_DEVICES)
                         : nullptr;
  return mask && (*static_cast<const uint32_t*>(mask) & (1u << device.kind));
}

void stage_comm(StagedComm& s, const loom_comm_v2* inner, void* inner_self,
                const loom_ops_v2* ops) {
  s.inner = inner;
  s.inner_self = inner_self;
  s.ops = ops;
  s.table = *inner;
  s.table.init = &init;
  s.table.split = &split;
  s.table.free_comm = &free_comm;
  s.table.rank = &rank_of;
  s.table.size = &size_of;
  s.table.all_reduce = &all_reduce;
  s.table.reduce_scatter = &reduce_scatter;
  s.table.all_gather = &all_gather;
  s.table.broadcast = &broadcast;
  s.table.all_to_all = &all_to_all;
  s.table.send = inner->send ? &send : nullptr;
  s.table.recv = inner->recv ? &recv : nullptr;
  s.table.barrier = &barrier;
  s.table.wait = &wait;
  s.table.group_start = inner->group_start ? &group_start : nullptr;
  s.table.group_end = inner->group_end ? &group_end : nullptr;
}

}  // namespace loom::dist
