// The expert slot as the model sees it: which experts this rank holds, and the three collectives
// of a MoE layer over the ep group (count exchange, dispatch, combine).
#pragma once

#include <loom/plugin.h>

#include <cstdint>
#include <vector>

#include "loader/registry.hpp"
#include "tensor/tensor.hpp"

namespace loom {

// One micro-batch's exchange through one MoE layer, kept from forward for backward.
struct ExpertRoute {
  std::vector<int64_t> sent;      // [E]: rows this rank routes to each expert
  std::vector<int64_t> received;  // [ep x local]: rows ep rank s routes to local expert j
  std::vector<int64_t> first;     // [local + 1]: local expert j's rows in dispatch's output
  int64_t rows_in() const;        // sum(sent)
  int64_t rows_local() const { return first.back(); }
};

class ExpertDispatch {
 public:
  // Starts the expert plugin on the ep group; it places the experts (or refuses the layout).
  ExpertDispatch(const loom_expert_context& ctx, plugins::Instance& plugin);
  int first_expert() const { return first_; }
  int local_experts() const { return count_; }
  // Fills route.received and route.first from route.sent (a collective over ep).
  void exchange(ExpertRoute& route);
  // rows [rows_in, C] grouped by expert -> out [rows_local, C] grouped by local expert.
  void dispatch(const ExpertRoute& route, const Tensor& rows, Tensor& out);
  // The inverse: out [rows_in, C] back in the layout dispatch read.
  void combine(const ExpertRoute& route, const Tensor& rows, Tensor& out);

 private:
  const loom_expert_v2* t_;
  void* self_;
  int first_ = 0, count_ = 0;
};

}  // namespace loom
