// Device buffers for a comm backend that takes host memory only (gloo, MPI): each operation's
// device tensors are copied to pinned host buffers on the comm stream, after the compute stream's
// work so far; the backend runs on the copies; what it wrote goes back on the comm stream, and
// the compute stream waits for that before its next kernel. An issued operation copies back when
// it is waited for. This is how a GPU cluster without NCCL runs gloo.
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <map>
#include <utility>

#include "tensor/ops_v2.h"

namespace loom::dist {

// The host copy of each device buffer the backend is told it will see again.
class PinnedCache {
 public:
  void* get(const loom_ops_v2* ops, const void* device, int64_t bytes) {
    auto [it, fresh] = blocks_.try_emplace({device, bytes}, nullptr);
    if (fresh) it->second = ops->pinned_alloc(bytes);
    return it->second;
  }

 private:
  std::map<std::pair<const void*, int64_t>, void*>
      blocks_;  // never freed: the backend keeps state on them
};

struct StagedComm {
  loom_comm_v2 table;  // forwards to `inner`, staging device tensors
  const loom_comm_v2* inner;
  void* inner_self;
  const loom_ops_v2* ops;
  PinnedCache kept;
};

// Whether `plugin` takes the memory of `device` itself (its LOOM_COMM_DEVICES mask; the host
// always).
bool comm_takes_device(const loom_plugin& plugin, loom_device device);

// Fills `s` to forward to (inner, inner_self), staging tensors on ops's device.
void stage_comm(StagedComm& s, const loom_comm_v2* inner, void* inner_self, const loom_ops_v2* ops);

}  // namespace loom::dist
