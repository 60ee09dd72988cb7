#include "train/hosts.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/json.hpp"
#include "tensor/tensor.hpp"
#include "train/metrics.hpp"

namespace loom::train {

Hosts gather_hosts(dist::CommWorld& world, const dist::InterfaceChoice& nic) {
  constexpr int kWords = 16;  // 128 bytes a rank: "host\tinterface\taddress"
  const int n = world.world().size();
  std::string mine = dist::host_name() + "\t" + nic.nic.name + "\t" + nic.nic.address;
  mine.resize(kWords * 8 - 1);
  std::vector<double> in(kWords), all(static_cast<size_t>(kWords) * n);
  std::memcpy(in.data(), mine.c_str(), mine.size() + 1);
  world.world().all_gather(flat_view(in.data(), LOOM_F64, kWords),
                           flat_view(all.data(), LOOM_F64, kWords * n));
  std::vector<std::string> said(n);
  for (int r = 0; r < n; ++r)
    said[r] = reinterpret_cast<const char*>(all.data() + static_cast<size_t>(r) * kWords);
  Hosts out;
  // Consecutive ranks on one host read as a range, the way launchers place them.
  for (int first = 0, end; first < n; first = end) {
    for (end = first + 1; end < n && said[end] == said[first];) ++end;
    const size_t t1 = said[first].find('\t'), t2 = said[first].find('\t', t1 + 1);
    const std::string name = said[first].substr(0, t1),
                      iface = said[first].substr(t1 + 1, t2 - t1 - 1),
                      address = said[first].substr(t2 + 1);
    const std::string ranks = "rank" +
                              (end - 1 > first ? "s " + std::to_string(first) + "-" : " ") +
                              std::to_string(end - 1);
    out.line += (out.line.empty() ? "" : "; ") + name + " (" + iface +
                (address.empty() ? "" : " " + address) + "): " + ranks;
    dist::remember_address(address, name + ": " + ranks);
    for (int r = first; r < end; ++r) out.of_rank.push_back(name);
  }
  return out;
}

// Rank 0 and the host's first rank pass a buffer back and forth: one warm-up round, then
// `rounds` timed ones; bandwidth counts both directions.
std::vector<Link> probe_links(dist::CommWorld& world, const Hosts& hosts) {
  dist::Communicator& w = world.world();
  if (!world.table()->send || !world.table()->recv) return {};
  constexpr int64_t kFloats = 1 << 18;  // 1 MiB
  constexpr int kRounds = 2, kTag = 0x4c4b;
  std::vector<float> buf(kFloats);
  const loom_tensor t = flat_view(buf.data(), LOOM_F32, kFloats);
  std::vector<Link> links;
  std::vector<std::string> seen = {hosts.of_rank[0]};
  for (int peer = 1; peer < static_cast<int>(hosts.of_rank.size()); ++peer) {
    const std::string& host = hosts.of_rank[peer];
    if (std::find(seen.begin(), seen.end(), host) != seen.end()) continue;
    seen.push_back(host);
    if (w.rank() != 0 && w.rank() != peer) continue;
    auto start = std::chrono::steady_clock::now();
    for (int round = 0; round <= kRounds; ++round) {
      if (round == 1) start = std::chrono::steady_clock::now();
      if (w.rank() == 0) {
        w.wait(w.send(t, peer, kTag));
        w.recv(t, peer, kTag);
      } else {
        w.recv(t, 0, kTag);
        w.wait(w.send(t, 0, kTag));
      }
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (w.rank() == 0) links.push_back({host, 2.0 * kRounds * kFloats * 4 / s / 1e6});
  }
  return links;
}

std::string describe_links(const std::vector<Link>& links) {
  std::string out;
  char mbs[32];
  for (const Link& l : links) {
    std::snprintf(mbs, sizeof mbs, "%.1f", l.mb_per_s);
    out += (out.empty() ? "" : ", ") + l.host + " " + mbs + " MB/s";
  }
  return out;
}

void write_links(const std::filesystem::path& run_dir, const std::string& rank0_host,
                 const std::vector<Link>& links) {
  std::string out = "{\"to\": " + json_quote(rank0_host) + ", \"links\": [";
  char mbs[32];
  for (size_t i = 0; i < links.size(); ++i) {
    std::snprintf(mbs, sizeof mbs, "%.3f", links[i].mb_per_s);
    out += std::string(i ? ", " : "") + "{\"host\": " + json_quote(links[i].host) +
           ", \"mb_per_s\": " + mbs + "}";
  }
  write_checked(run_dir / "links.json", out + "]}\n");
}

}  // namespace loom::train
