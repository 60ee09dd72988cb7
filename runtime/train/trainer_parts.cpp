#include "train/trainer_parts.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/format.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "data/data_settings.hpp"
#include "loader/services.hpp"
#include "parallel/context_attention.hpp"
#include "parallel/layer_api.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/data_check.hpp"
#include "train/metrics.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

// An exclusive flock on DIR/.lock with "pid host" in the file, held until the process exits.
void lock_dir(const fs::path& dir, const std::string& what, const std::string& way_out) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(what + " '" + dir.string() + "' cannot be written: " + ec.message());
  const fs::path lock = dir / ".lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("cannot open '" + lock.string() + "': " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ::close(fd);
    throw ConfigError(what + " '" + dir.string() + "' is in use by another job (pid and host: " + who + "); " + way_out +
                      ", or wait for it to end");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string me = std::to_string(::getpid()) + " " + host + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw RuntimeError("cannot write '" + lock.string() + "': " + std::strerror(errno));
  // fd stays open, and the lock held, until the process exits.
}

bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// A run that starts fresh would truncate an earlier run's metrics.jsonl and replace its
// checkpoints step by step: refused, with the two ways to go on.
void refuse_earlier_run(const fs::path& run_dir, const ckpt::CheckpointSettings& c, const fs::path& root) {
  if (!c.resume.empty()) return;
  const std::string held = c.every > 0 ? ckpt::existing_checkpoints(root) : "";
  std::error_code ec;
  const auto metrics = fs::file_size(run_dir / "metrics.jsonl", ec);
  const bool recorded = !ec && metrics > 0;
  if (held.empty() && !recorded) return;
  const bool own_root = same_dir(root, run_dir / "checkpoints");
  std::vector<std::string> found;
  if (recorded)
    found.push_back("run directory '" + run_dir.string() + "' holds an earlier run's metrics.jsonl" +
                    (own_root && !held.empty() ? " and checkpoints (" + held + ")" : ""));
  if (!held.empty() && (!recorded || !own_root))
    found.push_back("[checkpoint] dir '" + root.string() + "' holds checkpoints (" + held + ")");
  const std::string what = found.size() == 1 ? found[0] : found[0] + ", and " + found[1];
  const std::string elsewhere = held.empty() || own_root ? "--run-dir"
                                : recorded          ? "--run-dir and [checkpoint] dir"
                                                    : "[checkpoint] dir";
  throw ConfigError(what + ", and this run starts fresh ([checkpoint] resume = \"\"): it would overwrite them. Continue it "
                    "with --set checkpoint.resume=auto, or give this run another " + elsewhere + " (or move the old ones away)");
}

}  // namespace

void claim_run_dir(const fs::path& run_dir, const config::Config& cfg) {
  if (std::getenv("LOOM_RUN_DIR_LOCKED")) return;
  lock_dir(run_dir, "run directory", "give this one another --run-dir");
  const ckpt::CheckpointSettings c = ckpt::read_checkpoint(cfg);
  const fs::path root = c.dir.empty() ? run_dir / "checkpoints" : fs::path(c.dir);
  if (!c.dir.empty() && c.every > 0 && !same_dir(root, run_dir))  // a job that saves there owns it
    lock_dir(root, "checkpoint directory", "give this one another [checkpoint] dir");
  refuse_earlier_run(run_dir, c, root);
}

void write_plugins_record(const fs::path& run_dir, const plugins::Selection& selection) {
  std::string out = "{\"plugins\": [";
  for (size_t i = 0; i < selection.slots.size(); ++i) {
    const plugins::SlotChoice& c = selection.slots[i];
    const loom_plugin* d = c.found.desc;
    out += std::string(i ? ",\n  " : "\n  ") + "{\"slot\": " + json_quote(c.slot) + ", \"name\": " + json_quote(d->name) +
           ", \"version\": " + json_quote(d->version ? d->version : "") + ", \"abi\": \"" + std::to_string(d->v.major) + "." +
           std::to_string(d->v.minor) + "\", \"library\": " + json_quote(c.found.library.string()) + "}";
  }
  write_checked(run_dir / "plugins.json", out + "\n]}\n");
}

// This rank's sum of validation token losses over `batches` fixed windows of T local positions.
double validation_loss_sum(model::Model& model, const BatchFn& batch, int64_t batches, int64_t micro, int64_t T,
                           std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    batch(static_cast<int>(b), tok.data(), tgt.data());
    sum += model.forward({tok.data(), tgt.data(), micro, T, 0.f});
  }
  return sum;
}

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
void add_context_metrics(std::vector<std::pair<std::string, double>>& fields, const ContextAttention* cp,
                         dist::CommWorld* world) {
  if (!cp) return;
  ContextStats st = cp->stats();
  std::vector<double> all(cp->size());
  world->axis(dist::Axis::CP).all_gather(flat_view(&st.compute_ms, LOOM_F64, 1), flat_view(all.data(), LOOM_F64, cp->size()));
  fields.push_back({"cp_attention_ms", st.compute_ms});
  fields.push_back({"cp_attention_ms_max", *std::max_element(all.begin(), all.end())});
  fields.push_back({"cp_attention_ms_min", *std::min_element(all.begin(), all.end())});
  fields.push_back({"cp_exposed_comm_ms", st.exposed_comm_ms});
  fields.push_back({"cp_comm_bytes", double(st.bytes_sent)});
}

// The run's tokenizer, for text samples: [data] tokenizer, or tokenizer.json beside the shards.
// Without one, samples are bytes, which only a 256-token vocabulary can print.
std::unique_ptr<tok::Tokenizer> run_tokenizer(const config::Config& cfg, const model::Config& mc, bool sampling) {
  if (!sampling) return nullptr;  // only samples decode text
  const fs::path path = data::run_tokenizer_path(cfg);
  if (!path.empty()) {
    auto t = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_json_file(path));
    check_tokenizer_fits(t->vocab_size(), path, mc.vocab_size);
    return t;
  }
  if (mc.vocab_size != 256)
    throw ConfigError("[train] sample_every > 0 with [model] vocab_size = " + std::to_string(mc.vocab_size) +
                      " and no tokenizer: samples would print token ids as bytes; set [data] tokenizer, or put "
                      "tokenizer.json beside the shards (loom data prepare writes it), or set sample_every = 0");
  return nullptr;
}

void publish_placement(const dist::RankEnv& env, const dist::MeshShape& mesh) {
  loom_placement p{};
  p.rank = env.rank, p.world = env.world, p.local_rank = env.local_rank, p.local_world = env.local_world;
  const dist::Coord c = dist::coord_of(mesh, env.rank);
  const int sizes[LOOM_AXES] = {mesh.tp, mesh.cp, mesh.ep, mesh.dp, mesh.pp};
  const int coords[LOOM_AXES] = {c.tp, c.cp, c.ep, c.dp, c.pp};
  for (int a = 0; a < LOOM_AXES; ++a) p.axis_size[a] = sizes[a], p.axis_coord[a] = coords[a];
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  plugins::set_placement(p, host);
}

// What cannot exist with a ZeRO data plugin, refused before the first step rather than half-way.
void check_sharded(const Faults& faults, int stage, int64_t check_every) {
  const std::string zero = "[plugins] data = \"zero" + std::to_string(stage) + "\"";
  if (stage >= 3 && faults.perturb_step > 0)
    throw ConfigError(zero + " with [faults] perturb_step: zero3 holds each parameter once over dp, so there is "
                      "no replica for a perturbed rank to drift from; use zero1, zero2 or ddp to test replica checks");
  if (faults.perturb_step > 0 && (check_every == 0 || faults.perturb_step % check_every != 0))
    throw ConfigError(zero + " with [faults] perturb_step = " + std::to_string(faults.perturb_step) +
                      ": every step rebuilds the whole parameters from the shards, so a perturbed replica lives only "
                      "until the next all-gather; set [stability] check_every to a divisor of perturb_step");
}

}  // namespace loom::train
