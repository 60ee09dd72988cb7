// reduce_scatter's ring for gloo's communicators, over the same pair buffers gloo's own ring
// classes use (gloo has no legacy reduce-scatter class). Included by gloo.cpp only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "communicator.hpp"

namespace {

// len elements of input block b (blocks `count` long) from element i, in fp32: a plain copy for
// fp32 storage.
void read_block(const loom_tensor& ti, int64_t count, int64_t b, int64_t i, int64_t len,
                float* dst) {
  if (ti.dtype == LOOM_F32) {
    if (len > 0)
      std::memcpy(dst, static_cast<const float*>(ti.data) + b * count + i, len * sizeof(float));
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(ti.data) + b * count + i;
    for (int64_t j = 0; j < len; ++j) dst[j] = bf16_to_f32(h[j]);
  }
}

// reduce_scatter's ring over a communicator of 2 or more ranks. Step s of n-1: rank r sends its
// running partial of block (r-s-1) to r+1 (at s = 0, its own input block, straight from the
// caller's memory for fp32; the last step's sum lands straight in fp32 output) and receives r-1's
// partial of block (r-s-2), adding its own input block to it; at the last step that block is r
// and the sum goes straight to `out`. So only two blocks of partials are ever held, not a copy
// of the whole input. Each block moves in up to 2 chunks through two alternating inboxes (adding
// chunk k overlaps the transfer of chunk k+1; more chunks measured slower here, each costing a
// round trip); before reusing an inbox the sender waits for the
// receiver's "free". Sums run in fp32 whatever the storage.
class RingReduceScatter {
 public:
  // `result` (count elements) receives the sum of block r when the output is not fp32.
  RingReduceScatter(Comm* c, const loom_tensor& ti, const loom_tensor& to, loom_reduce_op op,
                    float* result)
      : c_(c),
        ti_(ti),
        to_(to),
        op_(op),
        n_(c->size),
        r_(c->rank),
        count_(numel(to)),
        f32_(ti.dtype == LOOM_F32),
        K_(std::max<int64_t>(1, std::min<int64_t>(2, count_ * 4 / (256 << 10)))),
        chunk_((count_ + K_ - 1) / K_),
        result_(result),
        right_(c->ctx->getPair(c->next(0))),
        left_(c->ctx->getPair(c->prev())),
        first_block_(((r_ - 1) % n_ + n_) % n_),
        transfers_((n_ - 1) * K_) {
    carve_working_memory();
    create_ring_buffers();
    if (f32_) create_direct_sends();
    const int note_slot = c_->ctx->nextSlot();
    free_out_ = left_->createSendBuffer(note_slot, &note_out_, 1);
    free_in_ = right_->createRecvBuffer(note_slot, &note_in_, 1);
  }

  // Transfer u: step u / K, chunk u % K. Up to two sends are in flight (one per inbox), and
  // the next is posted before the current chunk is added, so the wire never waits on adds.
  void run() {
    for (int64_t t = 0; t < transfers_; ++t) {
      // Post what may go: a transfer of step s > 0 sends the partial made K transfers earlier.
      while (posted_ <= t + 1 && posted_ < transfers_ && (posted_ < K_ || posted_ - K_ < combined_))
        post(posted_++);
      combine_received(t);
      if (t + 2 < transfers_) {
        if (notes_sent_ > 0) free_out_->waitSend();
        free_out_->send();
        ++notes_sent_;
      }
    }
    wait_for_sends();
    if (f32_ && op_ == LOOM_REDUCE_AVG)  // the sum is already in `to`
      for (int64_t i = 0; i < count_; ++i)
        static_cast<float*>(to_.data)[i] /= static_cast<float>(n_);
  }

 private:
  // Working memory, kept with the communicator: 2 inbox chunks, 2 send chunks, 2 partials.
  void carve_working_memory() {
    c_->inbox.resize(static_cast<size_t>(4 * chunk_ + 2 * count_));
    float* base = c_->inbox.data();
    inbox_[0] = base, inbox_[1] = base + chunk_;
    outbox_[0] = base + 2 * chunk_, outbox_[1] = base + 3 * chunk_;
    partial_[0] = base + 4 * chunk_, partial_[1] = base + 4 * chunk_ + count_;
  }

  void create_ring_buffers() {
    for (int i = 0; i < 2; ++i) {
      slots_[i] = c_->ctx->nextSlot();
      send_[i] = right_->createSendBuffer(slots_[i], outbox_[i], chunk_ * sizeof(float));
      recv_[i] = left_->createRecvBuffer(slots_[i], inbox_[i], chunk_ * sizeof(float));
    }
  }

  // Step 0 of fp32 sends the input block itself: one buffer per chunk straight over the
  // caller's memory, on the slot of the inbox it lands in, instead of a copy to an outbox.
  void create_direct_sends() {
    for (int64_t u = 0; u < K_; ++u) {
      const int64_t begin = u * chunk_,
                    len = std::max<int64_t>(0, std::min(chunk_, count_ - begin));
      float* src =
          const_cast<float*>(static_cast<const float*>(ti_.data)) + first_block_ * count_ + begin;
      direct_.push_back(len > 0 ? right_->createSendBuffer(slots_[u & 1], src, len * sizeof(float))
                                : nullptr);
    }
  }

  int64_t range(int64_t u, int64_t* begin) const {
    *begin = (u % K_) * chunk_;
    return std::max<int64_t>(0, std::min(chunk_, count_ - *begin));
  }

  void post(int64_t u) {
    const int64_t s = u / K_;
    int64_t begin = 0;
    const int64_t len = range(u, &begin);
    if (s == 0 && f32_) {
      if (u >= 2) free_in_->waitRecv();  // the right neighbour emptied inbox u & 1
      if (len > 0) direct_[u]->send(0, len * sizeof(float), 0);
      return;
    }
    if (in_flight_[u & 1]) send_[u & 1]->waitSend();  // transfer u-2 left this outbox
    float* box = outbox_[u & 1];
    if (s == 0)
      read_block(ti_, count_, first_block_, begin, len, box);
    else if (len > 0)
      std::memcpy(box, partial_[(s - 1) & 1] + begin, len * sizeof(float));
    if (u >= 2) free_in_->waitRecv();  // the right neighbour emptied inbox u & 1
    send_[u & 1]->send(0, len * sizeof(float), 0);
    in_flight_[u & 1] = true;
  }

  // Waits for transfer t and adds this rank's own input block to it.
  void combine_received(int64_t t) {
    const int64_t s = t / K_;
    int64_t begin = 0;
    const int64_t len = range(t, &begin);
    const int recv_block = ((r_ - static_cast<int>(s) - 2) % n_ + n_) % n_;
    recv_[t & 1]->waitRecv();
    // The last step's sum is the result: fp32 output takes it directly.
    float* last = f32_ ? static_cast<float*>(to_.data) : result_;
    float* dst = (s == n_ - 2 ? last : partial_[s & 1]) + begin;
    if (f32_ && op_ != LOOM_REDUCE_MAX && op_ != LOOM_REDUCE_MIN) {  // one pass: dst = own + got
      const float* own = static_cast<const float*>(ti_.data) + recv_block * count_ + begin;
      const float* got = inbox_[t & 1];
      for (int64_t i = 0; i < len; ++i) dst[i] = own[i] + got[i];
    } else {
      read_block(ti_, count_, recv_block, begin, len, dst);
      combine(dst, inbox_[t & 1], len, op_);
    }
    ++combined_;
  }

  void wait_for_sends() {
    for (int i = 0; i < 2; ++i)
      if (in_flight_[i]) send_[i]->waitSend();
    for (auto& d : direct_)
      if (d) d->waitSend();
    if (notes_sent_ > 0) free_out_->waitSend();
  }

  Comm* c_;
  const loom_tensor& ti_;
  const loom_tensor& to_;
  const loom_reduce_op op_;
  const int n_, r_;
  const int64_t count_;
  const bool f32_;
  const int64_t K_, chunk_;
  float* const result_;
  float* inbox_[2];
  float* outbox_[2];
  float* partial_[2];
  std::unique_ptr<gloo::transport::Pair>& right_;
  std::unique_ptr<gloo::transport::Pair>& left_;
  // Declared in the order they are created, so they are destroyed in reverse.
  std::unique_ptr<gloo::transport::Buffer> send_[2], recv_[2];
  int slots_[2];
  const int first_block_;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> direct_;
  char note_out_ = 0, note_in_ = 0;
  std::unique_ptr<gloo::transport::Buffer> free_out_, free_in_;
  const int64_t transfers_;
  int64_t posted_ = 0, combined_ = 0, notes_sent_ = 0;
  bool in_flight_[2] = {false, false};
};

}  // namespace
