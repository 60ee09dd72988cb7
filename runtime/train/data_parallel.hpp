// The data slot as the trainer sees it: the rank's place in the mesh, the comm world, and the
// data-parallel plugin that reduces gradients (told, layer by layer during the last micro-batch's
// backward, which gradients are final).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "gpt/gpt.hpp"
#include "loader/selection.hpp"

namespace loom::train {

// "rank 3", "ranks 0 and 1", "ranks 0, 2 and 5".
std::string describe_ranks(const std::vector<int>& ranks);

class DataParallel {
 public:
  // Starts the data plugin over the model, on the dp group of `world`.
  DataParallel(const config::Config& cfg, const plugins::Selection& sel, dist::CommWorld& world,
               ParamStore& params, gpt::Gpt& model);
  ~DataParallel();

  int dp_rank() const;
  int dp_size() const;
  // Tells the data plugin which gradients layer `i` finished.
  void after_layer(size_t i);
  // Waits for every gradient reduction; returns {comm_ms, exposed_comm_ms}.
  std::pair<double, double> finish();
  // Mean of a per-rank value over dp.
  double mean_over_dp(double v);
  // The world ranks of the dp replicas whose parameters differ from the majority's (checksum
  // of the flat buffer); both, when two replicas disagree. A collective over dp.
  std::vector<int> odd_replicas(const ParamStore& params);
  // Fails, naming the odd ranks, when the replicas' parameters differ; `when` says at what point.
  void check_identical(const ParamStore& params, const std::string& when);

 private:
  dist::CommWorld* world_;
  std::unique_ptr<plugins::Instance> data_;
  const loom_data_v1* table_ = nullptr;
  std::vector<loom_param_info> infos_;
  std::vector<std::vector<int64_t>> final_after_;  // layer -> params whose gradient it completes
};

}  // namespace loom::train
