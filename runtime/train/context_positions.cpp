#include "train/context_positions.hpp"

#include <algorithm>
#include <memory>

#include "parallel/context_attention.hpp"

namespace loom::train {

// Context parallelism holds T / cp positions of each sequence here: a batch is read whole, then
// cut to this rank's positions. Without cp, `read` fills the buffers directly.
BatchFn local_positions(const ContextAttention* cp, int64_t micro, BatchFn read) {
  if (!cp) return read;
  auto full_tok = std::make_shared<std::vector<int32_t>>(micro * cp->seq_len());
  auto full_tgt = std::make_shared<std::vector<int32_t>>(micro * cp->seq_len());
  return [=](int a, int32_t* tokens, int32_t* targets) {
    read(a, full_tok->data(), full_tgt->data());
    cp->take(full_tok->data(), tokens, micro);
    cp->take(full_tgt->data(), targets, micro);
  };
}

// The context plugin's attention time and exposed transfer time of the last step, and the
// spread of attention time over the cp group (its load balance).
void add_context_metrics(std::vector<std::pair<std::string, double>>& fields,
                         const ContextAttention* cp, dist::CommWorld* world) {
  if (!cp) return;
  ContextStats st = cp->stats();
  std::vector<double> all(cp->size());
  world->axis(dist::Axis::CP)
      .all_gather(flat_view(&st.compute_ms, LOOM_F64, 1),
                  flat_view(all.data(), LOOM_F64, cp->size()));
  fields.push_back({"cp_attention_ms", st.compute_ms});
  fields.push_back({"cp_attention_ms_max", *std::max_element(all.begin(), all.end())});
  fields.push_back({"cp_attention_ms_min", *std::min_element(all.begin(), all.end())});
  fields.push_back({"cp_exposed_comm_ms", st.exposed_comm_ms});
  fields.push_back({"cp_comm_bytes", double(st.bytes_sent)});
}

}  // namespace loom::train
