#include "tensor/tensor.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/errors.hpp"
#include "tensor/host_blocks.hpp"

namespace loom {

namespace {
TensorAllocator g_allocator;  // empty: the host heap
thread_local std::string t_purpose;

std::string shape_text(const std::vector<int64_t>& shape, loom_dtype dtype) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s + "] " + dtype_name(dtype);
}
}  // namespace

TensorPurpose::TensorPurpose(std::string what) : previous_(std::move(t_purpose)) {
  t_purpose = std::move(what);
}
TensorPurpose::~TensorPurpose() { t_purpose = std::move(previous_); }

size_t dtype_size(loom_dtype dt) {
  switch (dt) {
    case LOOM_F64:
    case LOOM_I64:
      return 8;
    case LOOM_F32:
    case LOOM_I32:
      return 4;
    case LOOM_BF16:
    case LOOM_F16:
      return 2;
    case LOOM_FP8_E4M3:
    case LOOM_FP8_E5M2:
    case LOOM_U8:
      return 1;
  }
  return 0;
}

const char* dtype_name(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32:
      return "f32";
    case LOOM_F64:
      return "f64";
    case LOOM_BF16:
      return "bf16";
    case LOOM_F16:
      return "f16";
    case LOOM_FP8_E4M3:
      return "fp8_e4m3";
    case LOOM_FP8_E5M2:
      return "fp8_e5m2";
    case LOOM_I32:
      return "i32";
    case LOOM_I64:
      return "i64";
    case LOOM_U8:
      return "u8";
  }
  return "?";
}

loom_tensor flat_view(void* data, loom_dtype dtype, int64_t n) {
  loom_tensor t{};
  t.data = data;
  t.device = g_allocator.owns && g_allocator.owns(data) ? g_allocator.device
                                                        : loom_device{LOOM_DEVICE_CPU, 0};
  t.dtype = dtype;
  t.ndim = 1;
  t.shape[0] = n;
  t.strides[0] = 1;
  return t;
}

void set_tensor_allocator(const TensorAllocator& a) { g_allocator = a; }
const TensorAllocator& tensor_allocator() { return g_allocator; }

namespace {
std::atomic<int64_t> g_heap_live{0}, g_heap_peak{0}, g_heap_mark_peak{0};

void raise_to(std::atomic<int64_t>& peak, int64_t now) {
  int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}
}  // namespace

void heap_bytes_held(int64_t delta) {
  const int64_t now = g_heap_live.fetch_add(delta) + delta;
  raise_to(g_heap_peak, now);
  raise_to(g_heap_mark_peak, now);
}

int64_t heap_tensor_peak_bytes() { return g_heap_peak.load(); }
int64_t heap_tensor_peak_since_mark() { return g_heap_mark_peak.load(); }
void mark_heap_tensor_peak() { g_heap_mark_peak.store(g_heap_live.load()); }

namespace {
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}
}  // namespace

Tensor Tensor::borrow(void* data, std::vector<int64_t> shape, loom_dtype dtype) {
  Tensor t;
  t.data_ = data;
  if (g_allocator.owns && g_allocator.owns(data)) t.device_ = g_allocator.device;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::empty(std::vector<int64_t> shape, loom_dtype dtype) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  size_t bytes = (static_cast<size_t>(n) * dtype_size(dtype) + 63) / 64 * 64;
  if (g_allocator.alloc) {
    void* p = nullptr;
    try {
      p = g_allocator.alloc(bytes ? bytes : 64);
    } catch (const RuntimeError& e) {  // the device is full: say which tensor asked
      throw RuntimeError("allocating " + (t_purpose.empty() ? std::string("a tensor") : t_purpose) +
                         " " + shape_text(shape, dtype) + ": " + e.what());
    }
    Tensor t = borrow(p, std::move(shape), dtype);
    t.owner_ = std::shared_ptr<void>(p, g_allocator.free);
    t.device_ = g_allocator.device;
    return t;
  }
  if (!bytes) bytes = 64;
  void* p = host_blocks::take(bytes);
  if (!p) throw RuntimeError("out of memory allocating " + std::to_string(bytes) + " bytes");
  Tensor t = borrow(p, std::move(shape), dtype);
  heap_bytes_held(static_cast<int64_t>(bytes));
  t.owner_ = std::shared_ptr<void>(p, [bytes](void* q) {
    host_blocks::give(q, bytes);
    heap_bytes_held(-static_cast<int64_t>(bytes));
  });
  return t;
}

Tensor Tensor::zeros(std::vector<int64_t> shape, loom_dtype dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.zero();
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::contiguous() const { return strides_ == contiguous_strides(shape_); }

template <class T>
T* Tensor::checked(loom_dtype want) {
  if (dtype_ != want)
    throw RuntimeError(std::string("tensor is ") + dtype_name(dtype_) + ", not " +
                       dtype_name(want));
  return static_cast<T*>(data_);
}

template float* Tensor::checked<float>(loom_dtype);
template int32_t* Tensor::checked<int32_t>(loom_dtype);

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  Tensor t = *this;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != numel() || !contiguous())
    throw RuntimeError("cannot reshape " + describe() + " to " + std::to_string(n) + " elements");
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * strides_[0] * dtype_size(dtype_);
  return t;
}

namespace {
// The device table that owns t's memory, or nullptr when the host may touch it.
const loom_ops_v2* device_table(const Tensor& t) {
  const TensorAllocator& a = g_allocator;
  return a.ops && !a.ops->host_reachable && a.owns && a.owns(t.data()) ? a.ops : nullptr;
}
}  // namespace

void upload(const Tensor& t, const void* host) { copy_bytes(t.data(), host, t.bytes()); }

void download(const Tensor& t, void* host) { copy_bytes(host, t.data(), t.bytes()); }  // waits

std::vector<float> to_host(const Tensor& t) {
  if (t.dtype() != LOOM_F32)
    throw RuntimeError("to_host: tensor is " + std::string(dtype_name(t.dtype())) + ", not f32");
  std::vector<float> v(static_cast<size_t>(t.numel()));
  download(t, v.data());
  return v;
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  const TensorAllocator& a = g_allocator;
  const loom_ops_v2* ops = a.ops;
  if (ops && !ops->host_reachable && a.owns && (a.owns(dst) || a.owns(src)))
    ops->copy(dst, src, static_cast<int64_t>(bytes));
  else
    std::memcpy(dst, src, bytes);
}

void Tensor::zero() {
  if (const loom_ops_v2* ops = device_table(*this))
    ops->zero(data_, static_cast<int64_t>(bytes()));
  else
    std::memset(data_, 0, bytes());
}

loom_tensor Tensor::desc() const {
  loom_tensor d{};
  d.data = data_;
  d.device = device_;
  d.dtype = dtype_;
  d.ndim = static_cast<int32_t>(shape_.size());
  for (size_t i = 0; i < shape_.size() && i < LOOM_MAX_DIMS; ++i) {
    d.shape[i] = shape_[i];
    d.strides[i] = strides_[i];
  }
  return d;
}

std::string Tensor::describe() const {
  std::string s = std::string(dtype_name(dtype_)) + "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  return s + "]";
}

}  // namespace loom
