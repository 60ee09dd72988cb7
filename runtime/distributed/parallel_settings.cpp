#include "distributed/parallel_settings.hpp"

namespace loom::dist {

using config::kInf;
using config::ValueType;

config::SectionSpec parallel_section() {
  return {"parallel",
          "the device mesh: tp (innermost) -> cp -> ep -> dp -> pp",
          {
              {"nproc", ValueType::Int, "1",
               "ranks `loom train` spawns when no launcher started it", 1, 4096},
              {"dp", ValueType::IntOrAuto, "\"auto\"",
               "data-parallel degree; auto = world / (tp pp ep cp)", 1, 65536},
              {"tp", ValueType::Int, "1", "tensor-parallel degree", 1, 4096},
              {"pp", ValueType::Int, "1", "pipeline-parallel degree", 1, 4096},
              {"pp_chunks", ValueType::Int, "0",
               "model chunks per pp rank (interleaved); 0 = the schedule's default", 0, 64},
              {"pp_layout", ValueType::String, "\"\"",
               "layer split over pp stages, e.g. \"E t t | t t L\"; \"\" = balanced by cost"},
              {"ep", ValueType::Int, "1", "expert-parallel degree", 1, 4096},
              {"cp", ValueType::Int, "1",
               "context-parallel degree: each rank holds seq_len / cp positions of every sequence",
               1, 4096},
              {"groups", ValueType::StringList, "[]",
               "a mixed cluster's node groups in node order, each \"NAME nodes=N [threads=T] "
               "[device=D]\"; they hold the pp stages in order"},
              {"timeout_s", ValueType::Int, "60",
               "a collective or rendezvous silent this long fails", 1, 86400},
              {"interface", ValueType::String, "\"\"",
               "network interface the ranks talk on (e.g. \"eth0\"); \"\" = GLOO_SOCKET_IFNAME, "
               "else the one that routes to MASTER_ADDR"},
          }};
}

ParallelSettings read_parallel(const config::Section& parallel) {
  ParallelSettings p;
  p.nproc = static_cast<int>(parallel.i64("nproc"));
  const toml::node* dp = parallel.node("dp");
  p.dp = dp->is_string() ? 0 : static_cast<int>(dp->value<int64_t>().value());
  p.tp = static_cast<int>(parallel.i64("tp"));
  p.pp = static_cast<int>(parallel.i64("pp"));
  p.ep = static_cast<int>(parallel.i64("ep"));
  p.cp = static_cast<int>(parallel.i64("cp"));
  p.pp_chunks = static_cast<int>(parallel.i64("pp_chunks"));
  p.pp_layout = parallel.str("pp_layout");
  p.interface = parallel.str("interface");
  p.timeout_s = parallel.i64("timeout_s");
  return p;
}

}  // namespace loom::dist
