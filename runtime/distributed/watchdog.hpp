// The comm watchdog: no rank outlives a collective that cannot finish. A backend's own timeout
// covers the waits it knows about, but not every way a peer can vanish: gloo blocks in a socket
// write forever when the link to its peer is cut mid-transfer (no FIN, no RST ever arrives).
// Every operation the runtime or a plugin issues goes through a watched copy of the comm plugin's
// table; an operation still running timeout_s + 5 s after it started ends the process with exit 1
// and a message naming the operation, this rank and its host. The backend's timeout fires first
// whenever it can, and its message, which names the peer, wins. The same copy tells the comm
// meter (comm_meter.hpp) what each operation moved and how long it blocked.
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <string>

namespace loom::dist {

struct WatchedComm {
  loom_comm_v2 table;  // forwards to `inner`, timing each blocking call
  const loom_comm_v2* inner;
  void* inner_self;
};

// Starts the watchdog thread (once per process) and fills `w` to forward to (inner, inner_self).
// `rank` and the limit go into its message.
void watch_comm(WatchedComm& w, const loom_comm_v2* inner, void* inner_self, int rank,
                int64_t limit_ms);

}  // namespace loom::dist
