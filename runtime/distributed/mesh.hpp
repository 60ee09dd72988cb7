// The device mesh: ranks laid out on axes tp (innermost) -> cp -> ep -> dp -> pp (outermost), so
// the chattiest axis stays inside a node:  rank = (((pp * DP + dp) * EP + ep) * CP + cp) * TP + tp.
#pragma once

#include <string>

#include "distributed/parallel_settings.hpp"

namespace loom::dist {

enum class Axis { TP, CP, EP, DP, PP };
constexpr int kAxes = 5;
const char* axis_name(Axis a);

struct MeshShape {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  int world() const { return tp * cp * ep * dp * pp; }
  // The ranks that hold one copy of the dense model state and split the batch between them: the
  // data slot's group (dp x ep x cp), whose gradients it reduces.
  int data_ranks() const { return dp * ep * cp; }
  int degree(Axis a) const;
  std::string describe() const;  // "dp=2 tp=1 pp=1 ep=1" (and " cp=2" when cp > 1)
};

struct Coord {
  int tp = 0, cp = 0, ep = 0, dp = 0, pp = 0;
  int along(Axis a) const;
};

// Degrees from [parallel] for `world` ranks; dp = "auto" takes what the others leave.
// Throws ConfigError when the product does not match the world size.
MeshShape resolve_mesh(const ParallelSettings& parallel, int world);
Coord coord_of(const MeshShape& m, int rank);
int rank_of(const MeshShape& m, const Coord& c);

// The split of the world communicator that forms `a`'s groups: ranks that differ only in their
// coordinate on `a` share a color; the key orders them by that coordinate.
struct Split {
  int color, key;
};
Split split_for(const MeshShape& m, int rank, Axis a);
// The data group: the dp x ep x cp ranks that split the global batch between them (same pp and
// tp), ordered by (dp * EP + ep) * CP + cp. With ep = cp = 1 it is the dp axis' group. The cp
// ranks of one (dp, ep) coordinate hold the same sequences, each a part of every sequence.
Split data_split(const MeshShape& m, int rank);
// The ranks that hold the same experts (and the same everything else): dp x cp.
Split expert_data_split(const MeshShape& m, int rank);

}  // namespace loom::dist
