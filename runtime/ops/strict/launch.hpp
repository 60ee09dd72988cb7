// One kernel launch on the strict device, as every entry of its op table makes it: the operands
// checked against the device's blocks and translated to the kernel's view, host operands staged
// the way a GPU's pinned uploads and fetches are, then the kernel queued on the calling thread's
// stream. Shared by the table's files (table.cpp, routing.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/strict/faults.hpp"
#include "ops/strict/memory.hpp"
#include "ops/strict/streams.hpp"

namespace loom::strict {

inline constexpr size_t kF = sizeof(float);

// The bytes of `rows` rows `ld` elements apart, each `cols` wide.
inline size_t span(int64_t rows, int64_t ld, int64_t cols, size_t elem = kF) {
  return rows <= 0 || cols <= 0 ? 0 : static_cast<size_t>((rows - 1) * ld + cols) * elem;
}
inline size_t floats(int64_t n) { return n <= 0 ? 0 : static_cast<size_t>(n) * kF; }

// From p to the end of its block, for an operand whose length the arguments do not give (the
// embedding table's rows).
inline size_t to_block_end(const void* p) {
  char* base = nullptr;
  size_t bytes = 0;
  return find_block(p, &base, &bytes) ? bytes - (static_cast<const char*>(p) - base) : 0;
}

// One kernel launch: its operands checked and translated to the kernel view, then queued.
class Launch {
 public:
  explicit Launch(const char* op) : op_(op) {}

  // An operand a GPU kernel reads from device memory; host memory is a broken contract.
  template <class T>
  T* device(T* p, size_t bytes, bool write, const char* arg) {
    if (!p) return nullptr;
    if (!is_device(p))
      contract_broken(
          std::string("op '") + op_ + "' was given host memory for '" + arg + "', called from " +
          calling_code() +
          ": a kernel reads and writes device memory only (copy the buffer to the device first)");
    access_.push_back(Access{p, bytes, write});
    return static_cast<T*>(kernel_view(p));
  }
  // An operand that may be host memory (the contract's staged arrays). One the kernel reads is
  // copied now, as a GPU's pinned upload is, and the host goes on; one it writes (losses, amax)
  // makes the host wait for the op.
  template <class T>
  T* staged(T* p, size_t bytes, bool write, const char* arg) {
    if (!p || is_device(p)) return device(p, bytes, write, arg);
    if (write) {
      waits_ = true;
      return p;
    }
    const char* c = reinterpret_cast<const char*>(p);
    uploads_.push_back(std::make_shared<std::vector<char>>(c, c + bytes));
    return reinterpret_cast<T*>(uploads_.back()->data());
  }
  void wait() { waits_ = true; }

  template <class F>
  void run(F work) {
    enqueue(op_, access_, [work = std::move(work), held = std::move(uploads_)] { work(); });
    if (waits_) sync_current_stream();
  }

 private:
  const char* op_;
  std::vector<Access> access_;
  std::vector<std::shared_ptr<std::vector<char>>> uploads_;  // host operands, copied at issue
  bool waits_ = false;
};

#define R(p, bytes) L.device(p, bytes, false, #p)
#define W(p, bytes) L.device(p, bytes, true, #p)

}  // namespace loom::strict
