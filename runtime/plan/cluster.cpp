#include "plan/cluster.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "config/config.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/nearest.hpp"
#include "plan/cluster_toml.hpp"
#include "plan/layout.hpp"

namespace loom::plan {

namespace {

using config::KeySpec;
using config::SectionSpec;
using config::ValueType;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A figure with no default: the file must give it. Listed here so "missing" names them all.
struct Required {
  const char* section;
  const char* key;
};
const Required kRequired[] = {
    {"cluster", "name"},      {"cluster", "nodes"},   {"cluster", "device"},
    {"cluster", "comm"},      {"device", "name"},     {"device", "per_node"},
    {"device", "memory_gib"}, {"device", "hbm_gbps"}, {"intra", "bandwidth_gbps"},
    {"intra", "latency_us"},
};
const Required kRequiredAcrossNodes[] = {
    {"inter", "nics_per_node"}, {"inter", "nic_gbits"}, {"inter", "latency_us"}};

// The cluster file's sections: the machine kind and its devices.
std::vector<SectionSpec> machine_sections() {
  return {
      {"cluster",
       "the machine kind: how many nodes there are and where the figures come from",
       {
           {"name", ValueType::String, "\"\"", "short name, shown by loom plan"},
           {"description", ValueType::String, "\"\"", "one line"},
           {"nodes", ValueType::Int, "1", "nodes available; a plan for more is refused", 1, 1e7},
           {"device",
            ValueType::String,
            "\"cpu\"",
            "what a Loom run there names as [run] device: cuda (NVIDIA GPUs) | cpu; the search "
            "ranks the layouts train accepts for it, and --emit writes it",
            -kInf,
            kInf,
            {"cuda", "cpu", "strict"}},
           {"comm",
            ValueType::String,
            "\"gloo\"",
            "the comm plugin a run there uses: nccl (GPUs) | gloo | mpi",
            -kInf,
            kInf,
            {"nccl", "gloo", "mpi"}},
           {"sources", ValueType::StringList, "[]",
            "where the figures come from (datasheets, papers, a calibration)"},
       }},
      {"device",
       "one accelerator (or, with shared_cores, one rank of a CPU machine)",
       {
           {"name", ValueType::String, "\"\"", "the part, as its vendor names it"},
           {"kind", ValueType::String, "\"\"",
            "the family whose efficiencies `loom plan published --fit` fits together (a100, "
            "h100); \"\" = none"},
           {"per_node", ValueType::Int, "8", "devices (ranks) per node", 1, 4096},
           {"memory_gib", ValueType::Float, "0", "device memory, GiB", 0, kInf},
           {"hbm_gbps", ValueType::Float, "0", "memory bandwidth, GB/s", 0, kInf},
           {"peak_tflops_bf16", ValueType::Float, "0", "dense bf16 peak, TFLOP/s (no sparsity)", 0,
            kInf},
           {"peak_tflops_fp16", ValueType::Float, "0",
            "dense fp16 peak, TFLOP/s; 0 = the bf16 figure", 0, kInf},
           {"peak_tflops_fp8", ValueType::Float, "0", "dense fp8 peak, TFLOP/s; 0 = none", 0, kInf},
           {"peak_tflops_fp32", ValueType::Float, "0",
            "fp32 peak, TFLOP/s (per core when shared_cores > 0)", 0, kInf},
           {"shared_cores", ValueType::Int, "0", "> 0: the node's ranks share this many CPU cores",
            0, 1 << 20},
           {"thread_scaling", ValueType::Float, "1",
            "GEMM speed-up of shared_cores threads in one process over one thread", 0, kInf},
           {"rank_scaling", ValueType::Float, "0",
            "GEMM throughput of shared_cores one-thread processes at once over one alone; 0 = "
            "thread_scaling",
            0, kInf},
           {"memory_headroom", ValueType::Float, "0.1",
            "fraction of device memory a plan leaves free", 0, 0.9},
       }}};
}

// The cluster file's sections: how devices talk: inside a node, between nodes, and the small ops
// inside one.
std::vector<SectionSpec> links_sections() {
  return {
      {"intra",
       "the link between devices of one node (NVLink/NVSwitch, PCIe, shared memory)",
       {
           {"kind",
            ValueType::String,
            "\"nvswitch\"",
            "what it is",
            -kInf,
            kInf,
            {"nvswitch", "nvlink", "pcie", "loopback"}},
           {"bandwidth_gbps", ValueType::Float, "0", "per device, one direction, GB/s", 0, kInf},
           {"latency_us", ValueType::Float, "0", "per ring hop, us", 0, kInf},
       }},
      {"inter",
       "the network between nodes",
       {
           {"kind",
            ValueType::String,
            "\"infiniband\"",
            "what it is",
            -kInf,
            kInf,
            {"infiniband", "roce", "omnipath", "ethernet", "none"}},
           {"nics_per_node", ValueType::Int, "0", "compute NICs per node", 0, 1024},
           {"nic_gbits", ValueType::Float, "0", "per NIC, one direction, Gbit/s", 0, kInf},
           {"latency_us", ValueType::Float, "0", "per ring hop across nodes, us", 0, kInf},
           {"rail_optimized", ValueType::Bool, "true",
            "NIC i of every node on one rail (DGX SuperPOD)"},
           {"nodes_per_pod", ValueType::Int, "0",
            "nodes under one non-blocking switch group; 0 = all", 0, 1e7},
           {"oversubscription", ValueType::Float, "1", "bandwidth divisor between pods", 1, kInf},
       }},
      {"intra_ops",
       "each collective within a node, measured over 2 ranks (loom plan calibrate): [latency per "
       "hop us, bus bandwidth GB/s]",
       {
           {"all_reduce", ValueType::FloatList, "[]", "[us, GB/s]", 0, kInf},
           {"reduce_scatter", ValueType::FloatList, "[]", "[us, GB/s]", 0, kInf},
           {"all_gather", ValueType::FloatList, "[]", "[us, GB/s]", 0, kInf},
           {"all_to_all", ValueType::FloatList, "[]", "[us, GB/s]", 0, kInf},
           {"send_recv", ValueType::FloatList, "[]", "[us, GB/s]", 0, kInf},
       }}};
}

// The cluster file's sections: what was fitted or measured on it.
std::vector<SectionSpec> fitted_sections() {
  return {
      {"efficiency",
       "achieved fractions of peak and fixed costs (loom plan calibrate measures them)",
       {
           {"gemm", ValueType::Float, "0.7", "large GEMMs, fraction of peak FLOP/s", 0, 1},
           {"gemm_overhead_us", ValueType::Float, "0",
            "fixed cost per GEMM call (launch, small-shape loss)", 0, kInf},
           {"attention", ValueType::Float, "0.5",
            "fused (flash) attention, forward and backward, fraction of peak FLOP/s", 0, 1},
           {"attention_unfused", ValueType::Float, "0",
            "unfused attention's batched GEMMs, fraction of peak FLOP/s; 0 = the attention figure",
            0, 1},
           {"attention_overhead_us", ValueType::Float, "0", "fixed cost per attention call", 0,
            kInf},
           {"score_bytes", ValueType::Float, "0",
            "bytes each attention score moves in forward under unfused attention (softmax, "
            "dropout)",
            0, kInf},
           {"score_saved_bytes", ValueType::Float, "0",
            "bytes per score unfused attention keeps for its backward (softmax output, dropout "
            "mask and output)",
            0, kInf},
           {"memory", ValueType::Float, "0.7",
            "element-wise ops and the optimizer, fraction of hbm_gbps", 0, 1},
           {"elementwise_overhead_us", ValueType::Float, "0", "fixed cost per element-wise call", 0,
            kInf},
           {"comm", ValueType::Float, "0.8", "collectives' bus bandwidth, fraction of the link", 0,
            1},
           {"overlap_cost", ValueType::Float, "0",
            "compute time lost per second of communication hidden behind it (the collectives' "
            "kernels share the SMs and memory bandwidth)",
            0, 1},
           {"compute_scale", ValueType::Float, "1",
            "a training step's measured compute over the modelled one (calibrated; 1 = trust the "
            "op figures)",
            0, kInf},
           {"rank_compute_scale", ValueType::Float, "0",
            "the same, measured with one one-thread rank per core (shared_cores); 0 = "
            "compute_scale",
            0, kInf},
           {"step_overhead_ms", ValueType::Float, "0",
            "per step outside the model: data, grad norm, logging", 0, kInf},
           {"process_mib", ValueType::Float, "0",
            "memory a rank holds before the model (runtime, CUDA context)", 0, kInf},
       }},
      {"calibration",
       "layouts measured on this cluster and the model's error on each (RECORD=FILE "
       "bench/plan_accuracy.sh)",
       {
           {"layouts", ValueType::StringList, "[]",
            "the measured layouts, as loom plan names them"},
           {"residuals", ValueType::FloatList, "[]",
            "measured over predicted step time, less 1, one per layout", -1, kInf},
           {"seq_len", ValueType::Int, "0", "their sequence length", 0, 1 << 30},
           {"source", ValueType::String, "\"\"", "what measured them, and when"},
       }},
      {"fit",
       "how the fitted [efficiency] figures predict the published runs of this device kind, each "
       "left out of its own fit (loom plan published --cross-validate)",
       {
           {"runs", ValueType::Int, "0",
            "published runs of this kind the efficiencies are fitted to", 0, 1 << 20},
           {"band", ValueType::FloatList, "[]",
            "[low, high]: the smallest and largest leave-one-out residual (predicted over "
            "published, less 1)",
            -1, kInf},
           {"median", ValueType::Float, "0", "the leave-one-out median |error|", 0, kInf},
       }}};
}

std::vector<SectionSpec> build_schema() {
  std::vector<SectionSpec> all;
  for (auto part : {machine_sections, links_sections, fitted_sections})
    for (SectionSpec& s : part()) all.push_back(std::move(s));
  return all;
}

const toml::table& section(const toml::table& root, const char* name) {
  static const toml::table empty;
  const toml::table* t = root.get_as<toml::table>(name);
  return t ? *t : empty;
}

double f64(const toml::table& root, const char* s, const char* k) {
  return section(root, s).get(k)->value<double>().value();
}
int64_t i64(const toml::table& root, const char* s, const char* k) {
  return section(root, s).get(k)->value<int64_t>().value();
}
std::vector<double> list(const toml::table& root, const char* s, const char* k) {
  std::vector<double> out;
  for (const auto& e : *section(root, s).get(k)->as_array())
    out.push_back(e.value<double>().value());
  return out;
}

std::string str(const toml::table& root, const char* s, const char* k) {
  return section(root, s).get(k)->value<std::string>().value();
}

void require(const toml::table& root, const Required& r, const std::string& source,
             const std::string& why) {
  const std::vector<SectionSpec>& schema = cluster_schema();
  std::string help;
  for (const auto& s : schema)
    for (const auto& k : s.keys)
      if (s.name == r.section && k.name == r.key) help = k.help;
  if (!section(root, r.section).contains(r.key))
    throw ConfigError(source + ": [" + r.section + "] " + r.key + " is missing (" + help + ")" +
                      why);
}

void require_positive(const toml::table& root, const char* s, const char* k,
                      const std::string& source) {
  const toml::node* n = section(root, s).get(k);
  if (n->value<double>().value() <= 0)
    throw ConfigError(config::where(*n) + ": [" + s + "] " + k + " must be positive, got " +
                      std::to_string(n->value<double>().value()));
}

void check_section_names(const toml::table& root) {
  std::vector<std::string> names;
  for (const auto& s : cluster_schema()) names.push_back(s.name);
  for (auto&& [key, node] : root) {
    const std::string name(key.str());
    if (std::find(names.begin(), names.end(), name) == names.end() || !node.is_table())
      throw ConfigError(config::where(node) + ": unknown section '" + name + "' in a cluster file" +
                        did_you_mean(name, names));
  }
}

// Before the defaults fill them: a cluster of several nodes must say what connects them.
void require_figures(const toml::table& root, const std::string& source) {
  for (const Required& r : kRequired) require(root, r, source, "");
  const toml::node* nodes = section(root, "cluster").get("nodes");
  if (nodes && nodes->is_integer() && nodes->value<int64_t>().value() > 1)
    for (const Required& r : kRequiredAcrossNodes)
      require(root, r, source,
              "; a cluster of " + std::to_string(nodes->value<int64_t>().value()) +
                  " nodes needs the network between them");
}

void fill_defaults(toml::table& root) {
  for (const auto& s : cluster_schema()) {
    if (!root.contains(s.name)) root.insert(s.name, toml::table{});
    config::check_table(*root.get_as<toml::table>(s.name), "[" + s.name + "]", s.keys, false);
  }
}

void read_device(const toml::table& root, const std::string& source, Cluster& c) {
  c.memory = f64(root, "device", "memory_gib") * (1ull << 30);
  c.hbm = f64(root, "device", "hbm_gbps") * 1e9;
  c.peak_bf16 = f64(root, "device", "peak_tflops_bf16") * 1e12;
  c.peak_fp16 = f64(root, "device", "peak_tflops_fp16") * 1e12;
  c.peak_fp8 = f64(root, "device", "peak_tflops_fp8") * 1e12;
  c.peak_fp32 = f64(root, "device", "peak_tflops_fp32") * 1e12;
  if (c.peak_bf16 <= 0 && c.peak_fp32 <= 0)
    throw ConfigError(
        source + ": [device] needs a peak: peak_tflops_bf16 or peak_tflops_fp32 (missing or 0)");
  c.shared_cores = static_cast<int>(i64(root, "device", "shared_cores"));
  if (c.shared_cores > 0) require_positive(root, "device", "thread_scaling", source);
  c.thread_scaling = f64(root, "device", "thread_scaling");
  c.rank_scaling = f64(root, "device", "rank_scaling");
  if (c.rank_scaling <= 0) c.rank_scaling = c.thread_scaling;
  c.headroom = f64(root, "device", "memory_headroom");
}

void read_links(const toml::table& root, const std::string& source, Cluster& c) {
  c.intra = {str(root, "intra", "kind"), f64(root, "intra", "bandwidth_gbps") * 1e9,
             f64(root, "intra", "latency_us") * 1e-6};
  if (c.nodes > 1) {
    for (const char* k : {"nics_per_node", "nic_gbits", "latency_us"})
      require_positive(root, "inter", k, source);
  }
  c.nics_per_node = static_cast<int>(i64(root, "inter", "nics_per_node"));
  c.inter = {str(root, "inter", "kind"), f64(root, "inter", "nic_gbits") * 1e9 / 8,
             f64(root, "inter", "latency_us") * 1e-6};
  c.rail_optimized = section(root, "inter").get("rail_optimized")->value<bool>().value();
  c.nodes_per_pod = static_cast<int>(i64(root, "inter", "nodes_per_pod"));
  c.oversubscription = f64(root, "inter", "oversubscription");
}

void read_efficiency(const toml::table& root, const std::string& source, Cluster& c) {
  c.gemm_eff = f64(root, "efficiency", "gemm");
  c.attention_eff = f64(root, "efficiency", "attention");
  c.memory_eff = f64(root, "efficiency", "memory");
  c.comm_eff = f64(root, "efficiency", "comm");
  c.overlap_cost = f64(root, "efficiency", "overlap_cost");
  for (const char* k : {"gemm", "attention", "memory", "comm"})
    require_positive(root, "efficiency", k, source);
  c.gemm_overhead = f64(root, "efficiency", "gemm_overhead_us") * 1e-6;
  c.attention_overhead = f64(root, "efficiency", "attention_overhead_us") * 1e-6;
  c.elementwise_overhead = f64(root, "efficiency", "elementwise_overhead_us") * 1e-6;
  c.step_overhead = f64(root, "efficiency", "step_overhead_ms") * 1e-3;
  c.score_bytes = f64(root, "efficiency", "score_bytes");
  c.score_saved_bytes = f64(root, "efficiency", "score_saved_bytes");
  c.attention_unfused_eff = f64(root, "efficiency", "attention_unfused");
  if (c.attention_unfused_eff <= 0) c.attention_unfused_eff = c.attention_eff;
}

void read_intra_ops(const toml::table& root, const std::string& source, Cluster& c) {
  const char* ops[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                       "send_recv"};  // loom_cost_op order
  for (int op = 0; op < 5; ++op) {
    const std::vector<double> v = list(root, "intra_ops", ops[op]);
    if (v.empty()) continue;
    if (v.size() != 2 || v[1] <= 0)
      throw ConfigError(source + ": [intra_ops] " + ops[op] +
                        " must be [latency us, bandwidth GB/s > 0]");
    c.intra_ops.op[op] = {c.intra.kind, v[1] * 1e9, v[0] * 1e-6};
    c.intra_ops.has[op] = true;
  }
}

void read_calibration(const toml::table& root, const std::string& source, Cluster& c) {
  for (const auto& e : *section(root, "calibration").get("layouts")->as_array())
    c.calibration.layouts.push_back(e.value<std::string>().value());
  c.calibration.residuals = list(root, "calibration", "residuals");
  c.calibration.seq_len = i64(root, "calibration", "seq_len");
  c.calibration.source = str(root, "calibration", "source");
  if (c.calibration.layouts.size() != c.calibration.residuals.size())
    throw ConfigError(source + ": [calibration] has " +
                      std::to_string(c.calibration.layouts.size()) + " layouts and " +
                      std::to_string(c.calibration.residuals.size()) +
                      " residuals; give one residual per layout");
  if (!c.calibration.layouts.empty() && c.calibration.seq_len <= 0)
    throw ConfigError(source +
                      ": [calibration] seq_len is missing (the measured layouts' sequence length)");
  for (const std::string& l : c.calibration.layouts) {
    try {
      parse_layout(l);
    } catch (const ConfigError& e) {
      throw ConfigError(source + ": [calibration] layouts: " + e.what());
    }
  }
}

}  // namespace

const std::vector<SectionSpec>& cluster_schema() {
  static const std::vector<SectionSpec> schema = build_schema();
  return schema;
}

double Cluster::peak(const std::string& dtype) const {
  if (dtype == "fp32") return peak_fp32;
  if (dtype == "fp16") return peak_fp16 > 0 ? peak_fp16 : peak_bf16;
  if (dtype == "fp8") return peak_fp8 > 0 ? peak_fp8 : peak_bf16;
  return peak_bf16;
}

Cluster parse_cluster(const std::string& text, const std::string& source) {
  toml::table root = parse_cluster_toml(text, source);
  if (root.contains("group"))
    throw ConfigError(source +
                      " has [[group]]s: it is a mixed cluster, which loom plan, config check and "
                      "[run] plan_cluster "
                      "read as one; a group's own file is uniform");
  check_section_names(root);
  require_figures(root, source);
  fill_defaults(root);
  Cluster c;
  c.source = source;
  c.name = str(root, "cluster", "name");
  c.nodes = static_cast<int>(i64(root, "cluster", "nodes"));
  c.device = str(root, "device", "name");
  c.run_device = str(root, "cluster", "device");
  c.comm = str(root, "cluster", "comm");
  c.kind = str(root, "device", "kind");
  c.per_node = static_cast<int>(i64(root, "device", "per_node"));
  for (const char* k : {"memory_gib", "hbm_gbps"}) require_positive(root, "device", k, source);
  for (const char* k : {"bandwidth_gbps", "latency_us"}) require_positive(root, "intra", k, source);
  read_device(root, source, c);
  read_links(root, source, c);
  read_efficiency(root, source, c);
  read_intra_ops(root, source, c);
  c.compute_scale = f64(root, "efficiency", "compute_scale");
  c.rank_compute_scale = f64(root, "efficiency", "rank_compute_scale");
  if (c.rank_compute_scale <= 0) c.rank_compute_scale = c.compute_scale;
  require_positive(root, "efficiency", "compute_scale", source);
  c.process_bytes = f64(root, "efficiency", "process_mib") * (1ull << 20);
  read_calibration(root, source, c);
  c.fit.runs = static_cast<int>(i64(root, "fit", "runs"));
  c.fit.band = list(root, "fit", "band");
  c.fit.median = f64(root, "fit", "median");
  if (!c.fit.band.empty() && c.fit.band.size() != 2)
    throw ConfigError(source + ": [fit] band must be [low, high]");
  return c;
}

std::string read_cluster_file(const std::filesystem::path& file) {
  try {
    return read_file(file, "cluster file");
  } catch (const RuntimeError& e) {
    throw ConfigError(e.what());  // a path the user typed: exit 2, like a config file
  }
}

toml::table parse_cluster_toml(const std::string& text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw ConfigError(source + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                      ": " + std::string(e.description()));
  }
}

Cluster load_cluster(const std::filesystem::path& file) {
  return parse_cluster(read_cluster_file(file), file.string());
}

bool has_table_line(const std::filesystem::path& file, const std::string& header) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(std::min(line.find_first_not_of(" \t"), line.size()), header.size(), header) ==
        0)
      return true;
  return false;
}

bool is_cluster_file(const std::filesystem::path& file) {
  return has_table_line(file, "[cluster]");
}

}  // namespace loom::plan
