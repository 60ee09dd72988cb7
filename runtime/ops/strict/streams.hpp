// The strict device's streams: each a worker thread that runs its queue in issue order, as a
// GPU stream does, so the host returns from a kernel before it has run. Events order one stream
// after another and let the host wait.
//
// Every op names the device bytes it reads and writes. Before it is queued, each access is
// checked against the other stream's work that this stream has not waited for (through an
// event, or through the host having waited): an op that reads a buffer before waiting on the
// event of the op that writes it is refused there, with both ops named, instead of racing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace loom::strict {

constexpr int kStreams = 2;  // LOOM_STREAM_COMPUTE, LOOM_STREAM_COMM
const char* stream_name(int stream);

// The stream this thread's work goes to (like a current CUDA stream); compute by default.
void set_stream(int stream);
int current_stream();

// Bytes an op reads or writes. Host memory in an access is not tracked.
struct Access {
  const void* p = nullptr;
  size_t bytes = 0;
  bool write = false;
};

// Checks `accesses` (throws RuntimeError naming `op` and the other stream's op on a hazard),
// then queues `work` on the current stream. `op` must be a string literal.
void enqueue(const char* op, const std::vector<Access>& accesses, std::function<void()> work);

int64_t record_event();
void wait_event(int64_t event);
void sync_event(int64_t event);
void sync_current_stream();
void synchronize();

// How many times the host has blocked on the device so far (sync_event, synchronize, a staged
// operand's wait): the same count for the same program, whatever the timing.
int64_t host_waits();

// Run once when the host has seen the current stream's work so far complete (a pinned block's
// protection lifted after the copy into it). Runs at the next wait that covers it.
void on_host_sees_current(std::function<void()> release);

// Kernel threads for the workers (OpenMP's count is per thread).
void set_worker_threads(int threads);

}  // namespace loom::strict
