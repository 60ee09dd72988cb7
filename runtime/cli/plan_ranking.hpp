// What `loom plan CONFIG --cluster FILE` ranked, on one node kind (plan_uniform.cpp) or on a
// cluster of node groups (plan_mixed.cpp), behind one interface: the command parses its options
// once and hands the ranking to one writer each for --explain, --emit, --json and the table.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/costing.hpp"
#include "train/job_settings.hpp"

namespace loom::cli {

// loom plan's command line.
struct PlanOptions {
  std::string file, cluster;
  std::optional<int> nodes, devices;
  int top = 10;
  std::vector<std::string> fix, sets;
  std::optional<std::string> explain, versus, emit, out;  // absent unless given, even as ""
  std::string dtype;
  bool json = false;
};

// The config --emit writes for a row: its layout and ranks, the --set overrides that make the
// command's config run it, and the head comment that says what was predicted.
struct Emitted {
  plan::Layout layout;
  int world = 1;
  std::vector<std::string> overrides;
  std::string head;
  std::string device;  // what the layout was planned for ([run] device: the cluster's on a GPU)
};

class Ranking {
 public:
  virtual ~Ranking() = default;
  // The row --OPTION WHAT names: a rank of the table ("1" is the top one) or a layout.
  virtual size_t row(const std::string& option, const std::string& what) = 0;
  virtual size_t size() = 0;
  virtual nlohmann::ordered_json json(size_t i) const = 0;
  virtual void explain(size_t i) const = 0;
  virtual Emitted emitted(size_t i) const = 0;
  // The ranked table with what is printed above and below it.
  virtual void table(size_t top) = 0;
};

std::unique_ptr<Ranking> uniform_ranking(const PlanOptions& o, const train::JobSettings& job);
std::unique_ptr<Ranking> mixed_ranking(const PlanOptions& o, const train::JobSettings& job);

// Shared by both: GiB; a row number as --OPTION gives it (none for a layout); --emit's overrides
// for a layout (the command's --set and --dtype, the layout's, and the cluster file the run then
// prints its prediction from).
double gib(double bytes);
std::optional<size_t> table_row(const std::string& option, const std::string& what, size_t rows);
std::vector<std::string> emit_overrides(const PlanOptions& o, const plan::Workload& w,
                                        const plan::Layout& l);

}  // namespace loom::cli
