// ZeRO's wire codec: the dtype its collectives carry, and the kernels that narrow what is sent
// and widen what arrives. It knows nothing of stages: zero.cpp says what is reduced or gathered,
// this says how it crosses.
//
//   fp32  the collective reads and writes the fp32 buffers themselves.
//   bf16  convert into a bf16 wire buffer, the collective in bf16, convert back (half the bytes).
//   fp8   loom/formats.hpp's E4M3 blocks, a scale each. No collective sums in 8 bits, so a
//         reduce-scatter is an all-to-all of every rank's n blocks (block j to rank j), summed in
//         fp32 on arrival and divided by n; a gather sends one block per rank.
//
// Every step is an op-table kernel on the wire's buffers, which live on the device with the
// model state (host memory on the CPU), so nothing here touches device memory from the host.
#pragma once

#include <loom/sdk.hpp>
#include <string>

#include "zero_parts.hpp"

namespace loom_zero {

// What one collective's narrow wire holds until it completes (nothing for fp32).
struct WireBufs {
  loom::sdk::DeviceArray<uint8_t> in, out;
  int64_t bytes() const { return in.bytes() + out.bytes(); }
};

class WireCodec {
 public:
  // ctx: the owning plugin's setup context, read at each call (set after construction).
  WireCodec(Wire wire, const loom_data_context& ctx, const loom_host* host)
      : wire_(wire), ctx_(ctx), host_(host) {}
  WireCodec(const WireCodec&) = delete;
  WireCodec& operator=(const WireCodec&) = delete;
  Wire wire() const { return wire_; }

  // out[0, piece) = the mean over `group`'s n ranks of their in[rank piece, (rank + 1) piece),
  // once `work` completed and reduced() ran. Returns the bytes this rank sends.
  int64_t reduce_scatter(loom_comm* group, int n, const float* in, float* out, int64_t piece,
                         WireBufs& bufs, loom_work** work) {
    loom_tensor tin = flat(const_cast<float*>(in), LOOM_F32, piece * n),
                tout = flat(out, LOOM_F32, piece);
    if (wire_ == Wire::FP8) {
      const int64_t stride = block_bytes(piece);
      bufs.in = array(n * stride, "an fp8 gradient wire"),
      bufs.out = array(n * stride, "an fp8 gradient wire");
      ctx_.ops->encode_blocks(bufs.in.data(), in, piece * n, piece, n);
      tin = flat(bufs.in.data(), LOOM_U8, n * stride),
      tout = flat(bufs.out.data(), LOOM_U8, n * stride);
      loom::sdk::ErrorBox err(host_);
      if (ctx_.comm->all_to_all(ctx_.comm_self, group, &tin, &tout, nullptr, nullptr, work,
                                err.get()) != LOOM_OK)
        err.raise("issuing a gradient all-to-all (fp8)");
      return (n - 1) * stride;
    }
    if (wire_ == Wire::BF16) {
      bufs.in = array(2 * piece * n, "a bf16 gradient wire"),
      bufs.out = array(2 * piece, "a bf16 gradient wire");
      loom::sdk::to_bf16(ctx_.ops, bufs.in.as<uint16_t>(), in, piece * n);
      tin = flat(bufs.in.data(), LOOM_BF16, piece * n),
      tout = flat(bufs.out.data(), LOOM_BF16, piece);
    }
    loom::sdk::ErrorBox err(host_);
    if (ctx_.comm->reduce_scatter(ctx_.comm_self, group, &tin, &tout, LOOM_REDUCE_AVG, work,
                                  err.get()) != LOOM_OK)
      err.raise("issuing a gradient reduce-scatter");
    return (n - 1) * wire_bytes(wire_, piece);
  }
  void reduced(int n, float* out, int64_t piece, WireBufs& bufs) const {
    if (wire_ == Wire::BF16) loom::sdk::from_bf16(ctx_.ops, out, bufs.out.as<uint16_t>(), piece);
    if (wire_ != Wire::FP8) return;
    ctx_.ops->decode_blocks(out, bufs.out.data(), piece, piece, n, LOOM_BLOCKS_SUM);
    ctx_.ops->scale(loom::sdk::f32(out), 1.f / static_cast<float>(n),
                    piece);  // the sum of n blocks: their mean, as AVG
  }

  // all[0, piece n) = every rank's mine[0, piece), in rank order, once `work` completed and
  // gathered() ran (null work: waited for here). `what` names it in an error. Returns the bytes
  // this rank sends.
  int64_t all_gather(loom_comm* group, int n, const float* mine, float* all, int64_t piece,
                     WireBufs& bufs, loom_work** work, const char* what) {
    loom_tensor tin = flat(const_cast<float*>(mine), LOOM_F32, piece),
                tout = flat(all, LOOM_F32, piece * n);
    if (wire_ == Wire::FP8) {
      const int64_t stride = block_bytes(piece);
      bufs.in = array(stride, "an fp8 parameter wire"),
      bufs.out = array(n * stride, "an fp8 parameter wire");
      ctx_.ops->encode_blocks(bufs.in.data(), mine, piece, piece, 1);
      tin = flat(bufs.in.data(), LOOM_U8, stride),
      tout = flat(bufs.out.data(), LOOM_U8, n * stride);
    } else if (wire_ == Wire::BF16) {
      bufs.in = array(2 * piece, "a bf16 parameter wire"),
      bufs.out = array(2 * piece * n, "a bf16 parameter wire");
      loom::sdk::to_bf16(ctx_.ops, bufs.in.as<uint16_t>(), mine, piece);
      tin = flat(bufs.in.data(), LOOM_BF16, piece),
      tout = flat(bufs.out.data(), LOOM_BF16, piece * n);
    }
    loom::sdk::ErrorBox err(host_);
    if (ctx_.comm->all_gather(ctx_.comm_self, group, &tin, &tout, work, err.get()) != LOOM_OK)
      err.raise(what);
    return (n - 1) * wire_bytes(wire_, piece);
  }
  void gathered(int n, float* all, int64_t piece, WireBufs& bufs) const {
    if (wire_ == Wire::BF16)
      loom::sdk::from_bf16(ctx_.ops, all, bufs.out.as<uint16_t>(), piece * n);
    if (wire_ == Wire::FP8) ctx_.ops->decode_blocks(all, bufs.out.data(), piece * n, piece, n, 0);
    bufs = WireBufs{};
  }

 private:
  static loom_tensor flat(void* p, loom_dtype dtype, int64_t n) {
    return loom::sdk::flat_tensor(p, dtype, n);
  }
  loom::sdk::DeviceArray<uint8_t> array(int64_t bytes, const char* what) const {
    return loom::sdk::DeviceArray<uint8_t>(host_, ctx_.ops, bytes, what);
  }

  Wire wire_;
  const loom_data_context& ctx_;
  const loom_host* host_;
};

}  // namespace loom_zero
