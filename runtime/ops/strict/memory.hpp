// The strict device's memory: as unreachable from host code as a discrete GPU's.
//
// Each chunk is one memfd mapped twice. The device view, whose addresses the allocator hands
// out, is PROT_NONE for its whole life, so a host dereference of a device pointer faults at
// once, on any thread, at any time. The stream workers run kernels on the kernel view: the same
// pages at another address. Pinned host buffers are ordinary host memory that the copies
// protect while a device-to-host copy into them is in flight, so reading one before waiting on
// the copy faults too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::strict {

// A caching allocator: freed blocks go to per-size free lists and are reused. Past the cap,
// a request throws RuntimeError with the size asked and the memory left, as a GPU's would.
void* device_alloc(size_t bytes);
// The most bytes of blocks held at once ([run] device_memory_mib), as a GPU's memory is; 0: no
// cap but the host's.
void set_memory_cap(size_t bytes);
void device_free(void* p);

struct MemoryStats {
  size_t in_use = 0, peak = 0, reserved = 0;  // bytes handed out now, at most, and mapped in all
  size_t peak_since_mark = 0;                 // the most in use since mark_peak()
};
MemoryStats memory_stats();
// Starts peak_since_mark again from what is in use now.
void mark_peak();

// Whether p lies in the device view (a live block or not).
bool is_device(const void* p);

// Where a kernel reads p: the kernel view of a device address; host addresses and NULL as given.
void* kernel_view(const void* p);

// The live block that holds p: its first byte and size. False for host memory or freed blocks.
bool find_block(const void* p, char** base, size_t* bytes);

// "a 4096-byte block at +128" for error messages, or "" for host memory.
std::string describe_device_address(const void* p);

// Page-locked host memory for staging (here: page-aligned host memory the copies can protect).
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);
// The pinned block holding p, for the copies: its first byte and size, or false.
bool find_pinned(const void* p, char** base, size_t* bytes);
// A copy into (`writes`) or out of a pinned block starts or ends. While copies write it the host
// may not touch it; while copies only read it the host may read it; then anything again.
void pin_for_copy(char* base, size_t bytes, bool writes);
void unpin_after_copy(char* base, size_t bytes, bool writes);
// For the fault handler, which must not wait on a lock the faulting thread may hold: whether p
// is device memory, a pinned block, neither, or unknown (the allocator's lock is taken).
enum class FaultAddress { device, pinned, other, unknown };
FaultAddress classify_fault_address(const void* p);

// Whether a copy the host has not waited for still uses the pinned block at p.
bool pinned_in_flight(const void* p);

}  // namespace loom::strict
