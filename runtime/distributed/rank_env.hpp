// Which rank of which job this process is, and where rank 0's store listens: what a launcher
// (loom's, torchrun, Slurm, Open MPI) tells each rank through its environment.
#pragma once

#include <string>

namespace loom::dist {

struct RankEnv {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string launcher = "none";  // "loom", "torchrun", "slurm", "mpi"
};

}  // namespace loom::dist
