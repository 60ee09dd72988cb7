#include "distributed/mesh.hpp"

#include "core/errors.hpp"

namespace loom::dist {

namespace {

// The one of five values (in mesh order) that names axis a; `other` for a value outside Axis.
int along_axis(Axis a, int tp, int cp, int ep, int dp, int pp, int other) {
  switch (a) {
    case Axis::TP:
      return tp;
    case Axis::CP:
      return cp;
    case Axis::EP:
      return ep;
    case Axis::DP:
      return dp;
    case Axis::PP:
      return pp;
  }
  return other;
}

}  // namespace

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::TP:
      return "tp";
    case Axis::CP:
      return "cp";
    case Axis::EP:
      return "ep";
    case Axis::DP:
      return "dp";
    case Axis::PP:
      return "pp";
  }
  return "?";
}

int MeshShape::degree(Axis a) const { return along_axis(a, tp, cp, ep, dp, pp, 1); }

std::string MeshShape::describe() const {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
         " ep=" + std::to_string(ep) + (cp > 1 ? " cp=" + std::to_string(cp) : "");
}

int Coord::along(Axis a) const { return along_axis(a, tp, cp, ep, dp, pp, 0); }

MeshShape resolve_mesh(const ParallelSettings& p, int world) {
  MeshShape m;
  m.tp = p.tp, m.pp = p.pp, m.ep = p.ep, m.cp = p.cp;
  int others = m.tp * m.pp * m.ep * m.cp;
  if (p.dp == 0) {
    if (world % others != 0)
      throw ConfigError("[parallel] tp x pp x ep x cp = " + std::to_string(others) +
                        " does not divide the world size " + std::to_string(world) +
                        " (set [parallel] nproc, or launch that many ranks)");
    m.dp = world / others;
  } else {
    m.dp = p.dp;
  }
  if (m.world() != world)
    throw ConfigError("[parallel] " + m.describe() + " needs " + std::to_string(m.world()) +
                      " ranks, but the world has " + std::to_string(world) +
                      " (set [parallel] nproc, or launch that many ranks, or use dp = \"auto\")");
  return m;
}

Coord coord_of(const MeshShape& m, int rank) {
  Coord c;
  c.tp = rank % m.tp;
  rank /= m.tp;
  c.cp = rank % m.cp;
  rank /= m.cp;
  c.ep = rank % m.ep;
  rank /= m.ep;
  c.dp = rank % m.dp;
  c.pp = rank / m.dp;
  return c;
}

int rank_of(const MeshShape& m, const Coord& c) {
  return (((c.pp * m.dp + c.dp) * m.ep + c.ep) * m.cp + c.cp) * m.tp + c.tp;
}

Split split_for(const MeshShape& m, int rank, Axis a) {
  Coord c = coord_of(m, rank);
  int key = c.along(a);
  Coord base = c;
  switch (a) {
    case Axis::TP:
      base.tp = 0;
      break;
    case Axis::CP:
      base.cp = 0;
      break;
    case Axis::EP:
      base.ep = 0;
      break;
    case Axis::DP:
      base.dp = 0;
      break;
    case Axis::PP:
      base.pp = 0;
      break;
  }
  return {rank_of(m, base), key};
}

Split data_split(const MeshShape& m, int rank) {
  Coord c = coord_of(m, rank), base = c;
  base.dp = base.ep = base.cp = 0;
  return {rank_of(m, base), (c.dp * m.ep + c.ep) * m.cp + c.cp};
}

Split expert_data_split(const MeshShape& m, int rank) {
  Coord c = coord_of(m, rank), base = c;
  base.dp = base.cp = 0;
  return {rank_of(m, base), c.dp * m.cp + c.cp};
}

}  // namespace loom::dist
