// The op table from C++: typed arguments, the bf16 wire casts, and buffers on the table's device.
// Included by <loom/sdk.hpp>; include that instead.
#pragma once

#ifndef LOOM_SDK_TABLES_FROM_SDK
#error "loom/sdk_ops.hpp is part of <loom/sdk.hpp>: include <loom/sdk.hpp> instead"
#endif

namespace loom::sdk {

// The op table's typed arguments (loom_ref, loom_cref) from pointers: fp32, or bf16 values held
// as their 16 bits (loom/bf16.hpp): ops->scale(loom::sdk::f32(x), 0.5f, n).
// A writable pointer passes where either is taken.
struct TypedArg {
  void* data;
  int32_t dtype;
  operator loom_ref() const { return {data, dtype, 0}; }
  operator loom_cref() const { return {data, dtype, 0}; }
};
inline TypedArg f32(float* p) { return {p, LOOM_F32}; }
inline loom_cref f32(const float* p) { return {p, LOOM_F32, 0}; }
inline TypedArg bf16(uint16_t* p) { return {p, LOOM_BF16}; }
inline loom_cref bf16(const uint16_t* p) { return {p, LOOM_BF16, 0}; }

// n elements of T on the op table's device (host->alloc on ops->device: the host heap on the CPU,
// counted with the tensors; device memory elsewhere, which host code reaches only through the
// table's copies and kernels), zero-filled, freed with the object. For the model state, wire
// buffers and scratch of a plugin that runs where the tensors live (LOOM_DATA_DEVICE).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  // `what` names the buffer in an out-of-memory error; a string literal (it is kept).
  DeviceArray(const loom_host* host, const loom_ops* ops, int64_t n, const char* what)
      : host_(host), ops_(ops), what_(what), n_(n) {
    const size_t bytes = static_cast<size_t>(n > 0 ? n : 1) * sizeof(T);
    p_ = static_cast<T*>(host->alloc(ops->device, bytes));
    if (!p_)
      throw Error(LOOM_SYSTEM, std::string("out of memory for ") + what + " (" +
                                   std::to_string(bytes) + " bytes)");
    if (n > 0) ops->zero(p_, static_cast<int64_t>(bytes));
  }
  ~DeviceArray() { release(); }
  DeviceArray(DeviceArray&& o) noexcept { take(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) release(), take(o);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return p_; }
  // The same bytes as another element type (a bf16 wire held as bytes).
  template <class U>
  U* as() const {
    return reinterpret_cast<U*>(p_);
  }
  int64_t size() const { return n_; }
  int64_t bytes() const { return n_ * static_cast<int64_t>(sizeof(T)); }
  // At least n elements: reallocated, zero-filled, when it holds fewer (its contents are lost).
  T* at_least(int64_t n) {
    if (n > n_) *this = DeviceArray(host_, ops_, n, what_);
    return p_;
  }

 private:
  void release() {
    if (p_) host_->free(ops_->device, p_);
    p_ = nullptr, n_ = 0;
  }
  void take(DeviceArray& o) {
    host_ = o.host_, ops_ = o.ops_, what_ = o.what_, p_ = o.p_, n_ = o.n_;
    o.p_ = nullptr, o.n_ = 0;
  }
  const loom_host* host_ = nullptr;
  const loom_ops* ops_ = nullptr;
  const char* what_ = "";
  T* p_ = nullptr;
  int64_t n_ = 0;
};

// fp32 to bf16 and back on the table's device, as a narrow wire sends them (round to nearest
// even, NaN kept; the widening is exact).
inline void to_bf16(const loom_ops* ops, uint16_t* dst, const float* src, int64_t n) {
  ops->convert(bf16(dst), f32(src), n, 1.f, nullptr, nullptr);
}
inline void from_bf16(const loom_ops* ops, float* dst, const uint16_t* src, int64_t n) {
  ops->convert(f32(dst), bf16(src), n, 1.f, nullptr, nullptr);
}

}  // namespace loom::sdk
