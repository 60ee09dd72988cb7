// A tensor: dtype, shape and strides over a shared, 64-byte-aligned buffer on one device.
// Views (reshape, row slices) share the buffer; the C descriptor (loom_tensor) borrows it.
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ops_v2.h"

namespace loom {

size_t dtype_size(loom_dtype dt);
const char* dtype_name(loom_dtype dt);

// A 1-D contiguous descriptor over raw memory, for handing buffers to plugins.
loom_tensor flat_view(void* data, loom_dtype dtype, int64_t n);

// Where Tensor::empty gets its memory: the host heap, unless a device's runtime installed its own
// (CUDA: managed memory that both the host code and the kernels reach; strict: memory only the
// device's op table reaches, so zero() and the host copies go through `ops`).
struct TensorAllocator {
  void* (*alloc)(size_t bytes) = nullptr;
  void (*free)(void* p) = nullptr;
  loom_device device{LOOM_DEVICE_CPU, 0};
  const loom_ops_v2* ops = nullptr;       // the device's table; nullptr: the host heap
  bool (*owns)(const void* p) = nullptr;  // whether p is this allocator's memory (views too)
};
void set_tensor_allocator(const TensorAllocator& a);
const TensorAllocator& tensor_allocator();
// Host-heap tensors: the most bytes held at once so far (like a device allocator's peak, without
// the process's code and libraries). heap_bytes_held records an allocation (+) or release (-).
int64_t heap_tensor_peak_bytes();
// The most held at once since mark_heap_tensor_peak(), which starts it again from what is held.
int64_t heap_tensor_peak_since_mark();
void mark_heap_tensor_peak();
void heap_bytes_held(int64_t delta);

// What the tensors this thread allocates while it lives are for ("the parameters", "block 3"):
// a device's out-of-memory error names it, with the tensor's shape. Scopes nest; the innermost
// names.
class TensorPurpose {
 public:
  explicit TensorPurpose(std::string what);
  ~TensorPurpose();
  TensorPurpose(const TensorPurpose&) = delete;
  TensorPurpose& operator=(const TensorPurpose&) = delete;

 private:
  std::string previous_;
};

class Tensor;
// The host's way into a tensor on any device: stream-ordered copies through the device's table
// (a memcpy for host tensors). A download has finished when it returns.
void upload(const Tensor& t, const void* host);
void download(const Tensor& t, void* host);
std::vector<float> to_host(const Tensor& t);  // an f32 tensor's values
// bytes from src to dst, either side host or device memory: through the device's copy when
// either is the device's (to host memory it has finished when it returns), else memcpy.
void copy_bytes(void* dst, const void* src, size_t bytes);

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised contiguous storage (CPU).
  static Tensor empty(std::vector<int64_t> shape, loom_dtype dtype = LOOM_F32);
  static Tensor zeros(std::vector<int64_t> shape, loom_dtype dtype = LOOM_F32);
  // A tensor over memory someone else owns (e.g. a slice of a flat parameter buffer).
  static Tensor borrow(void* data, std::vector<int64_t> shape, loom_dtype dtype = LOOM_F32);

  bool defined() const { return data_ != nullptr; }
  loom_dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const;
  size_t bytes() const { return numel() * dtype_size(dtype_); }
  bool contiguous() const;

  float* f32() { return checked<float>(LOOM_F32); }
  const float* f32() const { return const_cast<Tensor*>(this)->f32(); }
  int32_t* i32() { return checked<int32_t>(LOOM_I32); }
  const int32_t* i32() const { return const_cast<Tensor*>(this)->i32(); }
  void* data() const { return data_; }

  // Same buffer, new shape (contiguous only; numel must match).
  Tensor reshape(std::vector<int64_t> shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor rows(int64_t begin, int64_t end) const;
  void zero();

  loom_tensor desc() const;
  std::string describe() const;  // "f32[8, 256, 384]"

 private:
  template <class T>
  T* checked(loom_dtype want);
  std::shared_ptr<void> owner_;
  loom_device device_{LOOM_DEVICE_CPU, 0};
  void* data_ = nullptr;
  loom_dtype dtype_ = LOOM_F32;
  std::vector<int64_t> shape_, strides_;
};

}  // namespace loom
