// A cluster description for `loom plan`: one TOML file per machine kind (clusters/*.toml) with
// the device's peak FLOP/s and memory, the links inside a node and between nodes, and the
// achieved efficiencies the cost model scales them by. Every figure cites its source in the file.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/schema.hpp"

namespace loom::plan {

// One level of the network: a ring over it moves bytes at `bandwidth` (bytes/s per device, one
// direction) after `latency` seconds per hop.
struct Link {
  std::string kind;
  double bandwidth = 0, latency = 0;
};

// Latency and bandwidth of each collective within a node, measured (loom plan calibrate) where
// a backend's collectives differ (gloo's all_gather and reduce_scatter move bytes slower than its
// all_reduce on loopback). Indexed by loom_cost_op; a missing one falls back to [intra].
struct OpLinks {
  Link op[5];
  bool has[5] = {false, false, false, false, false};
};

struct Cluster {
  std::string name, source;  // source: the file it came from
  int nodes = 1;             // nodes the cluster has; the planner refuses more
  // What a run there names: [run] device ("cuda", "cpu") and [plugins] comm ("nccl", "gloo").
  std::string run_device = "cpu", comm = "gloo";

  std::string device;
  std::string kind;   // the device family fitted together ("a100", "h100"); "" = none
  int per_node = 1;   // devices (ranks) per node
  double memory = 0;  // bytes per device
  double hbm = 0;     // bytes/s per device
  double peak_bf16 = 0, peak_fp16 = 0, peak_fp8 = 0, peak_fp32 = 0;  // FLOP/s, dense
  int shared_cores = 0;       // > 0: the node's devices share this many CPU cores (a CPU machine)
  double thread_scaling = 1;  // speed-up of shared_cores threads over one, for GEMMs
  // Throughput of shared_cores one-thread processes running at once over one alone: what ranks
  // that split the cores get together (no shared thread pool, no barriers between them).
  double rank_scaling = 1;
  double headroom = 0.1;  // fraction of device memory kept free ("fits" leaves this)

  Link intra, inter;
  OpLinks intra_ops;  // empty unless calibrated
  int nics_per_node = 0;
  bool rail_optimized = true;
  int nodes_per_pod = 0;        // nodes under one non-blocking switch group; 0 = all
  double oversubscription = 1;  // between pods

  // Achieved fractions of peak and fixed costs, calibrated (this machine) or chosen per kind.
  double gemm_eff = 0.7, attention_eff = 0.5, memory_eff = 0.7, comm_eff = 0.8;
  // Compute time lost per second of communication hidden behind it: the collectives' kernels
  // take SMs and memory bandwidth from the compute they overlap.
  double overlap_cost = 0;
  double gemm_overhead = 0, attention_overhead = 0, elementwise_overhead = 0;  // seconds per call
  double step_overhead = 0;  // seconds per step outside the model (data, logging, grad norm)
  // Measured over modelled compute of a whole training step (calibrated): the runtime's own
  // work the op fits do not see (copies, bias and embedding kernels, accumulation, hooks).
  double compute_scale = 1;
  // The same with one one-thread rank per core of a CPU machine (shared_cores), where no thread
  // pool's barriers cost what they cost one rank running every core.
  double rank_compute_scale = 1;
  // Unfused attention (a workload's choice: 2021-22 Megatron) writes the [heads, T, T] scores out:
  // its batched GEMMs' efficiency, the bytes each score moves in a forward (softmax and dropout
  // read and write it) and the bytes per score it keeps for its backward. A fused (flash) kernel
  // keeps them on chip.
  double attention_unfused_eff = 0.5, score_bytes = 0, score_saved_bytes = 0;
  double process_bytes = 0;  // memory a rank holds before the model (runtime, CUDA context)
  // Layouts measured on this cluster and the model's error on each ([calibration]).
  struct Measured {
    std::vector<std::string> layouts;
    std::vector<double> residuals;  // measured / predicted step time - 1
    int64_t seq_len = 0;
    std::string source;
  } calibration;

  // The published runs of this kind the [efficiency] figures were fitted to, and the band of
  // their leave-one-out residuals ([fit]); runs 0 where nothing was fitted.
  struct Fitted {
    int runs = 0;
    std::vector<double> band;  // [low, high]
    double median = 0;
  } fit;

  // Peak FLOP/s of one device for a training dtype (fp32, bf16, fp16, fp8).
  double peak(const std::string& dtype) const;
  int devices() const { return nodes * per_node; }
};

// The file's sections and keys, for `loom config check` and `loom config show`.
const std::vector<config::SectionSpec>& cluster_schema();

// Reads and checks a cluster file: a missing, negative or zero figure, an unknown key (with the
// nearest valid one) or a wrong type is a ConfigError naming the file and the key.
Cluster load_cluster(const std::filesystem::path& file);
Cluster parse_cluster(const std::string& text, const std::string& source);

// True when the file looks like a cluster description (has a [cluster] table).
bool is_cluster_file(const std::filesystem::path& file);

}  // namespace loom::plan
