// The gloo plugin's communicator: a gloo context with the worker thread that runs its operations
// in issue order, the store adapter gloo's rendezvous needs, and the dtype and reduction helpers.
// Internal to plugins/comm/gloo (included by gloo.cpp only, hence the unnamed namespace).
#pragma once

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <loom/bf16.hpp>
#include <loom/sdk.hpp>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

// A queued collective (done), or a posted point-to-point transfer (p2p) that completes in wait.
struct loom_work {
  std::future<void> done;
  std::unique_ptr<gloo::transport::Buffer> p2p;  // a point-to-point transfer's pair buffer
  bool is_send = false;
  int peer = -1, rank = -1;
};

namespace {

using loom::sdk::element_size;
using loom::sdk::Error;
using loom::sdk::numel;

// gloo's rendezvous store interface over the runtime's store, under a key prefix per communicator.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(const loom_store& s, std::string prefix) : s_(s), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    put(s_, prefix_ + key, data.data(), data.size());
  }
  std::vector<char> get(const std::string& key) override { return fetch(s_, prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);
  }

  static void put(const loom_store& s, const std::string& key, const void* data, size_t n) {
    loom::sdk::ErrorBox e(host());
    if (s.set(s.self, key.c_str(), data, n, e.get()) != LOOM_OK) e.raise("rendezvous store set");
  }
  static std::vector<char> fetch(const loom_store& s, const std::string& key) {
    loom::sdk::ErrorBox e(host());
    const void* p = nullptr;
    size_t n = 0;
    if (s.get(s.self, key.c_str(), &p, &n, e.get()) != LOOM_OK) e.raise("rendezvous store get");
    return std::vector<char>(static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }

 private:
  static const loom_host* host() { return loom::sdk::detail::host(); }
  const loom_store& s_;
  std::string prefix_;
};

using loom::sdk::bf16_to_f32;
using loom::sdk::f32_to_bf16;

struct Comm;
// Registers a communicator with the abort handler while it lives (disagreement.hpp).
void track(Comm* c, bool alive);

// A communicator: a gloo context plus the worker thread that runs its operations in order.
struct Comm {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::shared_ptr<gloo::transport::Device> device;
  const loom_store* store = nullptr;
  std::string id;  // store key prefix, unique per communicator
  int rank = 0, size = 1, splits = 0;
  std::chrono::milliseconds timeout{30000};
  uint64_t issued = 0;  // collectives issued on this communicator, numbering them
  // Collectives whose signature ("all_reduce of 1024 x f32") is compared with the ring
  // neighbours' before they run: the first kFirstChecked, then every check_every-th (0: none,
  // 1: all). The numbering is the same on every rank, so every rank checks the same ones.
  static constexpr uint64_t kFirstChecked = 64;
  int64_t check_every = 64;
  // Between group_start and group_end, and the group's transfers so far when recorded.
  bool grouped = false;
  std::string group;

  std::mutex m;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> queue;
  bool stop = false;
  std::thread worker;

  Comm() {
    track(this, true);
    worker = std::thread([this] {
      for (;;) {
        std::packaged_task<void()> task;
        {
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] { return stop || !queue.empty(); });
          if (queue.empty()) return;
          task = std::move(queue.front());
          queue.pop_front();
        }
        task();
      }
    });
  }
  // Operations still queued are abandoned (their waiters get an error, not a hang); the one
  // running finishes (or times out) before the algorithms and buffers it uses are freed.
  ~Comm() {
    track(this, false);
    std::deque<std::packaged_task<void()>> abandoned;
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
      abandoned.swap(queue);
    }
    cv.notify_all();
    worker.join();
    persistent.clear();
  }

  // Returns once every operation issued before it has completed.
  void drain() {
    run([] {}, false, "drain");
  }

  // Runs `f` on the worker after everything issued before it; returns a handle or waits.
  // `what` names the operation and its size ("all_reduce of 1024 x f32"); the communicator
  // numbers it, so ranks that issue different collectives can say which ones (see
  // disagreement.hpp).
  loom_work* run(std::function<void()> f, bool async, const std::string& what) {
    const bool local = what == "drain";  // not a collective: other ranks do not count it
    const std::string name = local ? what : what + " #" + std::to_string(++issued);
    const bool check =
        !local && size > 1 && check_every > 0 &&
        (issued <= kFirstChecked || issued % static_cast<uint64_t>(check_every) == 0);
    std::packaged_task<void()> task([this, f = std::move(f), name, what, check] {
      set_running(name);
      try {
        if (check) compare_with_neighbours(what, name);
        f();
      } catch (const Error&) {
        set_running("");
        throw;
      } catch (const std::exception& e) {
        set_running("");
        throw Error(LOOM_FATAL, failure_message(name, e.what()));
      }
      set_running("");
    });
    auto work = std::make_unique<loom_work>();
    work->done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(m);
      queue.push_back(std::move(task));
    }
    cv.notify_one();
    if (async) return work.release();
    work->done.get();
    return nullptr;
  }

  // The operation on the worker now ("" when idle), for the abort handler.
  std::string running_op() {
    std::lock_guard<std::mutex> lock(running_m);
    return running;
  }

  // Sends this collective's signature to the next rank and compares the previous rank's with it:
  // a size that differs by one element between ranks, which the ring would reduce without a
  // word, is an error naming both (defined in disagreement.hpp). One small round trip.
  void compare_with_neighbours(const std::string& what, const std::string& name);

  // Says what failed, and what the other ranks of this group were running if they report a
  // different operation (defined in disagreement.hpp).
  std::string failure_message(const std::string& op, const std::string& gloo_error);

  // Point-to-point messages so far per (peer, direction, tag): both ends count the same
  // messages, so a transfer's slot can carry its sequence number (see Gloo::post).
  std::map<std::tuple<int, int, int>, uint32_t> p2p_sent;

  // reduce_scatter's working memory, kept between calls (no page faults after the first).
  std::vector<float> work, inbox;
  // Algorithms built for persistent buffers, reused on the next call with the same buffer.
  std::map<std::tuple<void*, int64_t, int, int>, std::unique_ptr<gloo::Algorithm>> persistent;

  int next(int) const { return (rank + 1) % size; }
  int prev() const { return (rank + size - 1) % size; }

 private:
  void set_running(const std::string& op) {
    std::lock_guard<std::mutex> lock(running_m);
    running = op;
  }
  std::mutex running_m;
  std::string running;
};

// "all_reduce of 1024 x f32": what a failure report says about an operation.
std::string describe(const char* op, const loom_tensor& t) {
  static const char* names[] = {"f32",     "f64", "bf16", "f16", "fp8e4m3",
                                "fp8e5m2", "i32", "i64",  "u8"};
  const char* dtype = t.dtype >= 0 && t.dtype <= LOOM_U8 ? names[t.dtype] : "?";
  return std::string(op) + " of " + std::to_string(numel(t)) + " x " + dtype;
}

Comm* as_comm(loom_comm* c) { return reinterpret_cast<Comm*>(c); }
const Comm* as_comm(const loom_comm* c) { return reinterpret_cast<const Comm*>(c); }
loom_comm* as_handle(Comm* c) { return reinterpret_cast<loom_comm*>(c); }

// Reduction of fp32 staging buffers: dst = op(dst, src).
void combine(float* dst, const float* src, size_t n, loom_reduce_op op) {
  switch (op) {
    case LOOM_REDUCE_MAX:
      for (size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      break;
    case LOOM_REDUCE_MIN:
      for (size_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      break;
    default:
      for (size_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
  }
}

// Copies a tensor into fp32 (bf16 widened) so reductions run in fp32 whatever the storage; `v`
// may be a buffer reused between calls.
void stage_f32(const loom_tensor& t, int64_t n, std::vector<float>& v) {
  v.resize(static_cast<size_t>(n));
  if (t.dtype == LOOM_F32) {
    if (n > 0) std::memcpy(v.data(), t.data, n * 4);  // (memcpy from a null buffer is undefined)
  } else if (t.dtype == LOOM_BF16) {
    for (int64_t i = 0; i < n; ++i) v[i] = bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
  } else {
    throw Error(LOOM_INTERNAL, "gloo reduces f32 and bf16 tensors only");
  }
}

std::vector<float> to_f32(const loom_tensor& t, int64_t n) {
  std::vector<float> v;
  stage_f32(t, n, v);
  return v;
}

void from_f32(const std::vector<float>& v, const loom_tensor& t, size_t offset_elems, int64_t n) {
  if (t.dtype == LOOM_F32) {
    if (n > 0) std::memcpy(static_cast<float*>(t.data), v.data() + offset_elems, n * 4);
  } else {
    for (int64_t i = 0; i < n; ++i)
      static_cast<uint16_t*>(t.data)[i] = f32_to_bf16(v[offset_elems + i]);
  }
}

// gloo's chunked ring all-reduce, then the division that turns a sum into a mean. Building the
// algorithm costs a quarter of a 64 MiB reduction here, so for persistent buffers it is kept.
template <class T>
void reduce_in_place(Comm* c, T* data, int64_t n, loom_reduce_op op, bool persistent) {
  const gloo::ReductionFunction<T>* fn = op == LOOM_REDUCE_MAX   ? gloo::ReductionFunction<T>::max
                                         : op == LOOM_REDUCE_MIN ? gloo::ReductionFunction<T>::min
                                                                 : gloo::ReductionFunction<T>::sum;
  if (persistent) {
    auto key = std::make_tuple(static_cast<void*>(data), n, static_cast<int>(op),
                               static_cast<int>(sizeof(T)));
    auto& algo = c->persistent[key];
    if (!algo)
      algo = std::make_unique<gloo::AllreduceRingChunked<T>>(c->ctx, std::vector<T*>{data},
                                                             static_cast<int>(n), fn);
    algo->run();
  } else {
    gloo::AllreduceRingChunked<T> algo(c->ctx, {data}, static_cast<int>(n), fn);
    algo.run();
  }
  if (op == LOOM_REDUCE_AVG)
    for (int64_t i = 0; i < n; ++i) data[i] /= static_cast<T>(c->size);
}

}  // namespace
