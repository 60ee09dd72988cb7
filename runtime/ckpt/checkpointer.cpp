#include "ckpt/checkpointer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/crc32c.hpp"
#include "ckpt/reader.hpp"
#include "config/config.hpp"
#include "config/section.hpp"
#include "core/errors.hpp"
#include "core/files.hpp"
#include "distributed/mesh.hpp"
#include "model/model.hpp"

namespace fs = std::filesystem;

namespace loom::ckpt {

namespace {

std::string rank_file(int rank, const char* ext) {
  char b[32];
  std::snprintf(b, sizeof b, "rank-%05d.%s", rank, ext);
  return b;
}

}  // namespace

Checkpointer::Checkpointer(CheckpointerSetup setup, TrainingState state)
    : every_(setup.settings.every),
      keep_last_(setup.settings.keep_last),
      verify_(setup.settings.verify),
      resume_(setup.settings.resume),
      config_text_(std::move(setup.config_text)),
      precision_name_(std::move(setup.precision)),
      world_(setup.world),
      mesh_(setup.mesh),
      rank_(setup.rank),
      write_error_step_(setup.write_error_step),
      model_(std::move(setup.model)),
      state_(std::move(state)) {
  const plugins::Selection& sel = *setup.selection;
  for (const plugins::SlotChoice& c : sel.slots)
    plugins_.push_back({{"slot", c.slot},
                        {"name", c.found.desc->name},
                        {"version", c.found.desc->version ? c.found.desc->version : ""},
                        {"abi", std::to_string(c.found.desc->v.major) + "." +
                                    std::to_string(c.found.desc->v.minor)},
                        {"library", c.found.library.string()}});
  root_ = setup.settings.dir.empty() ? setup.run_dir / "checkpoints" : fs::path(setup.settings.dir);
  if (every_ == 0) return;
  const plugins::SlotChoice* ckpt = sel.slot("ckpt");
  if (!ckpt)
    throw ConfigError("[checkpoint] every = " + std::to_string(every_) +
                      " needs a checkpoint writer ([plugins] ckpt)");
  writer_ = std::make_unique<plugins::Instance>(ckpt->found, &setup.writer_options);
  table_ = writer_->table<loom_ckpt_v2>();
  if (table_->open) {
    loom_error e;
    check(table_->open(writer_->self(), root_.c_str(), rank_, mesh_.world(), &e), e,
          "checkpoint writer open");
  }
  reader_ = reader_of(*writer_);
  if (rank_ == 0) check_writable();
}

// A checkpoint directory that cannot be written is found now, not at the first save hours in.
void Checkpointer::check_writable() const {
  std::error_code ec;
  fs::create_directories(root_, ec);
  const fs::path probe = root_ / (".write-test-" + std::to_string(::getpid()));
  const int fd = ec ? -1 : ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const std::string why = ec ? ec.message() : fd < 0 ? std::strerror(errno) : "";
  if (fd >= 0) ::close(fd), fs::remove(probe, ec);
  if (!why.empty())
    throw RuntimeError("checkpoint directory '" + root_.string() + "' cannot be written (" + why +
                       "); set [checkpoint] dir to one that can, before training starts");
}

// Leaving on an error with an async save in flight: the checksum thread and the writer still
// read blob_, so both finish before it goes.
Checkpointer::~Checkpointer() {
  if (pending_ && pending_->crc.valid()) pending_->crc.wait();
  writer_.reset();
  if (cleanup_.valid()) cleanup_.wait();
}

void Checkpointer::check(loom_status s, const loom_error& e, const std::string& what) const {
  if (s != LOOM_OK) throw RuntimeError(what + ": " + e.message);
}

std::map<std::string, int64_t> Checkpointer::layout() const {
  return {{"world", mesh_.world()}, {"dp", mesh_.dp}, {"tp", mesh_.tp},
          {"pp", mesh_.pp},         {"ep", mesh_.ep}, {"cp", mesh_.cp}};
}

void Checkpointer::barrier() {
  if (world_) world_->world().barrier();
}

// dp rank 0 writes (under ZeRO every dp rank, its pieces); a tensor replicated over tp only tp
// rank 0; a pipeline mirror never (its owner does).
bool Checkpointer::writes(const Param& q) const {
  const dist::Coord c = dist::coord_of(mesh_, rank_);
  return !q.mirror &&
         (state_.shards.pieces || (c.dp == 0 && c.cp == 0 && (q.ep_sharded() || c.ep == 0))) &&
         (q.tp_sharded() || c.tp == 0);
}

size_t Checkpointer::owned_bytes() const {
  size_t total = 0;
  if (state_.shards.pieces) {
    for (const loom_shard_piece& pc : state_.shards.pieces())
      if (writes(state_.params->all()[pc.param])) total += 3 * 4 * static_cast<size_t>(pc.count);
    return total;
  }
  for (const Param& q : state_.params->all())
    if (writes(q)) total += 3 * 4 * static_cast<size_t>(q.value.numel());
  return total;
}

// Every file the manifest lists is in the directory at the size the runtime handed the writer.
void Checkpointer::check_written(const fs::path& dir, const Manifest& m) const {
  auto one = [&](const File& f) {
    const int64_t size = reader_.size(dir, f.name);
    if (size < 0)
      throw RuntimeError(
          "checkpoint " + dir.stem().string() + ": the writer did not write " + f.name + " (" +
          (reader_.via == "disk" ? "no such file" : reader_.via + " does not hold it") +
          "); not committed, the previous checkpoint and `latest` are kept");
    if (size != f.bytes)
      throw RuntimeError("checkpoint " + dir.stem().string() + ": " + f.name + " has " +
                         std::to_string(size) + " bytes, the writer was given " +
                         std::to_string(f.bytes) +
                         "; not committed, the previous checkpoint and `latest` are kept");
  };
  for (const File& f : m.files) one(f);
  if (!m.precision_state.name.empty()) one(m.precision_state);
}

// What the writer stored, read back (through its read path, or from disk) and checksummed
// against what it was given: a writer that stores the right number of zeros is caught here, before
// `latest` names its checkpoint. Each rank reads back its own files; the cost is one read of them
// (from the page cache, usually), measured in docs/checkpoints.md.
void Checkpointer::verify_written(const fs::path& dir, const File& f) const {
  if (!verify_) return;
  const int64_t size = reader_.size(dir, f.name);
  if (size != f.bytes) return;  // check_written names a missing or short file, with every rank's
  const uint32_t crc = checksum(reader_, dir, f.name);
  if (crc != f.crc32c) {
    char b[160];
    std::snprintf(b, sizeof b,
                  ": read back, its crc32c is %08x, the bytes the writer was given have %08x", crc,
                  f.crc32c);
    throw RuntimeError("checkpoint " + dir.stem().string() + ": " + f.name + b + " (" +
                       reader_.via +
                       "); not committed, the previous checkpoint and `latest` are kept");
  }
}

// Tensor shapes can agree while the model does not (n_head 4 -> 2 keeps every shape): the
// checkpoint's own config says what it is.
void Checkpointer::check_same_model(const fs::path& dir, const Manifest& man) const {
  if (man.config.empty()) return;  // written before checkpoints carried their config
  config::Config theirs = config::Config::parse(man.config, (dir / "manifest.json").string());
  theirs.check_sections(model::model_sections());
  const std::vector<std::string> diff =
      model::architecture_differences(model::read_model(theirs.section("model")), model_);
  if (diff.empty()) return;
  std::string list;
  for (const auto& d : diff) list += (list.empty() ? "" : "; ") + d;
  throw ConfigError("cannot resume: " + dir.string() + " holds another model ([model] " + list +
                    ")");
}

int64_t Checkpointer::resume() {
  ParamStore& params = *state_.params;
  *state_.applied = 0;
  // The staging buffer is allocated and touched now, before training: the first save then
  // stalls no longer than the later ones.
  if (writer_) blob_.resize(owned_bytes());
  if (resume_.empty()) return 1;
  std::error_code ec;
  if (resume_ == "auto" && !fs::exists(root_ / "latest", ec)) {  // a first submission: start fresh
    if (rank_ == 0)
      std::printf("resume = \"auto\": no checkpoint in %s yet; starting at step 1\n",
                  root_.c_str());
    return 1;
  }
  const fs::path dir = resolve(root_, resume_ == "auto" ? "latest" : resume_);
  const Manifest man = read_manifest(dir);
  check_same_model(dir, man);
  const CheckpointReader source(dir, man);  // the recorded writer's read path, or the disk
  const Reader& reader = source.reader();
  try {
    verify(dir, man, reader);
  } catch (const RuntimeError& e) {
    throw RuntimeError(std::string("cannot resume: ") + e.what() +
                       (resume_ == "latest" || resume_ == "auto"
                            ? "; not falling back to an older checkpoint on my own: name one with "
                              "[checkpoint] resume = \"<dir>\" if you want it"
                            : ""));
  }
  for (Param& p : params.all()) {
    auto expect = man.shapes.find(p.name);
    if (expect == man.shapes.end())
      throw RuntimeError("cannot resume: " + dir.string() + " has no parameter " + p.name);
    if (expect->second != p.global_shape)
      throw RuntimeError("cannot resume: parameter " + p.name + " has another shape in " +
                         dir.string());
  }
  if (state_.shards.pieces)
    load_pieces(dir, man, reader);
  else
    load_slices(dir, man, reader);
  if (Precision* precision = state_.precision) {
    if (man.precision != precision->name())
      throw RuntimeError("cannot resume: " + dir.string() + " was written under precision '" +
                         man.precision + "', this run uses '" + precision->name() + "'");
    const std::vector<char> state = reader.read(dir, man.precision_state.name);
    precision->load_state(std::string(state.begin(), state.end()));
  }
  load_plugin_state(dir, man, reader);
  *state_.applied = man.applied;
  if (rank_ == 0)
    std::printf("resumed from %s: step %lld done\n", dir.c_str(), (long long)man.step);
  return man.step + 1;
}

// ZeRO: this rank's pieces only, each cut from the tensor assembled globally.
void Checkpointer::load_pieces(const fs::path& dir, const Manifest& man, const Reader& reader) {
  std::map<std::string, std::vector<char>> files;  // each file read once
  std::map<std::string, std::vector<float>> global;
  for (const loom_shard_piece& pc : state_.shards.pieces()) {
    const Param& q = state_.params->all()[pc.param];
    for (auto [suffix, dst] :
         {std::pair{"", pc.value}, {".adam_m", pc.adam_m}, {".adam_v", pc.adam_v}}) {
      const std::string name = q.name + suffix;
      if (!global.count(name)) global[name] = assemble(dir, man, name, files, reader);
      const std::vector<float>& g = global[name];
      std::vector<float> piece(
          static_cast<size_t>(pc.count));  // then to the plugin's memory, maybe the device's
      for (int64_t i = 0; i < pc.count; ++i)
        piece[i] = g[global_index(pc.begin + i, q.local_shape, q.global_shape, q.slice)];
      copy_bytes(dst, piece.data(), piece.size() * sizeof(float));
    }
  }
  state_.shards.loaded();
}

// Replicated state: this rank's slice of each parameter and its moments.
void Checkpointer::load_slices(const fs::path& dir, const Manifest& man, const Reader& reader) {
  std::map<std::string, std::vector<char>> files;  // each file read once
  for (Param& p : state_.params->all()) {
    for (auto [suffix, dst] : {std::pair{"", p.value.f32()},
                               {".adam_m", state_.m->f32() + p.offset},
                               {".adam_v", state_.v->f32() + p.offset}}) {
      const std::vector<float> global = assemble(dir, man, p.name + suffix, files, reader);
      std::vector<float> local(
          static_cast<size_t>(p.value.numel()));  // this rank's slice, then to the device
      for (int64_t i = 0; i < p.value.numel(); ++i)
        local[i] = global[global_index(i, p.local_shape, p.global_shape, p.slice)];
      copy_bytes(dst, local.data(), local.size() * sizeof(float));
    }
  }
}

bool Checkpointer::after_step(int64_t step, int64_t last_step) {
  if (!writer_) return false;
  if (step % every_ == 0 || step == last_step) {
    save(step);
    return true;
  }
  loom_error e;
  check(table_->poll ? table_->poll(writer_->self(), &e) : LOOM_OK, e,
        "checkpoint " + step_name(pending_ ? pending_->step : step));
  return false;
}

// ZeRO: the rank's pieces of the values and moments, each a flat range of its parameter.
size_t Checkpointer::stage_pieces(Pending& p, Copies& copies) const {
  size_t at = 0;
  for (const loom_shard_piece& pc : state_.shards.pieces()) {
    const Param& q = state_.params->all()[pc.param];
    if (!writes(q)) continue;
    for (auto [suffix, src] :
         {std::pair{"", pc.value}, {".adam_m", pc.adam_m}, {".adam_v", pc.adam_v}}) {
      Part part{q.name + suffix, q.local_shape, q.slice.length >= 0 ? q.slice : Slice{},
                static_cast<int64_t>(at)};
      part.flat_begin = pc.begin;
      part.flat_count = pc.count;
      p.mine.parts.push_back(part);
      copies.push_back({src, 4 * static_cast<size_t>(pc.count)});
      at += 4 * pc.count;
    }
  }
  return at;
}

// Replicated state: the slices this rank writes of each parameter and its moments.
size_t Checkpointer::stage_slices(Pending& p, Copies& copies) const {
  size_t at = 0;
  for (const Param& q : state_.params->all()) {
    if (!writes(q)) continue;
    for (auto [suffix, src] : {std::pair{"", q.value.f32()},
                               {".adam_m", state_.m->f32() + q.offset},
                               {".adam_v", state_.v->f32() + q.offset}}) {
      p.mine.parts.push_back({q.name + suffix, q.local_shape,
                              q.slice.length >= 0 ? q.slice : Slice{}, static_cast<int64_t>(at)});
      copies.push_back({src, 4 * static_cast<size_t>(q.value.numel())});
      at += 4 * q.value.numel();
    }
  }
  return at;
}

void Checkpointer::save(int64_t step) {
  if (pending_) commit();  // the previous save completes before the next starts
  const fs::path tmp = root_ / (step_name(step) + ".tmp");
  if (rank_ == 0) {
    fs::create_directories(root_);
    fs::remove_all(tmp);  // a leftover of a run that died mid-save
    fs::create_directory(tmp);
  }
  barrier();
  auto p = std::make_unique<Pending>();
  p->step = step;
  p->applied = *state_.applied;
  const size_t total = owned_bytes();
  // The staging buffer is kept between saves: after the first, building it faults no pages.
  if (blob_.size() < total) blob_.resize(total);
  for (const Param& q : state_.params->all())
    for (const char* suffix : {"", ".adam_m", ".adam_v"})
      p->shapes[q.name + suffix] = q.global_shape;
  Copies copies;  // source and byte count of each part
  state_.shards.pieces ? stage_pieces(*p, copies) : stage_slices(*p, copies);
  // The copy is the whole stall of an async save: spread it over the cores.
  char* blob = blob_.data();
#pragma omp parallel for schedule(dynamic)
  for (size_t k = 0; k < copies.size(); ++k)
    copy_bytes(blob + p->mine.parts[k].offset, copies[k].first, copies[k].second);
  // The fault injection stands in for a full disk: the writer is pointed at a directory that
  // does not exist, so its write fails the way ENOSPC would, with the path in the message.
  write_files(*p, step == write_error_step_ ? (tmp / "unwritable").string() : tmp.string(), total);
  pending_ = std::move(p);
  if (!(plugins::ckpt_capabilities(writer_->desc()) & LOOM_CKPT_ASYNC))
    commit();  // a sync writer is done
}

// Hands the writer this rank's file, its data-plugin state and (rank 0) the precision state.
void Checkpointer::write_files(Pending& p, const std::string& target, size_t total) {
  loom_error e;
  const std::string what = "checkpoint " + step_name(p.step);
  if (!p.mine.parts.empty()) {
    p.mine.name = rank_file(rank_, "bin");
    p.mine.bytes = static_cast<int64_t>(total);
    // blob_ stays unchanged until commit() (the next save starts with it): the checksum runs in
    // the background and a writer that can may write straight from it.
    const char* blob = blob_.data();
    p.crc = std::async(std::launch::async, [blob, total] { return crc32c(blob, total); });
    auto save = table_->save_stable ? table_->save_stable : table_->save;
    check(save(writer_->self(), target.c_str(), p.mine.name.c_str(), blob, total, &e), e, what);
  }
  if (state_.plugin.save && !(p.state_bytes = state_.plugin.save()).empty()) {
    p.state = {data_state_file(rank_),
               static_cast<int64_t>(p.state_bytes.size()),
               crc32c(p.state_bytes.data(), p.state_bytes.size()),
               {}};
    check(table_->save(writer_->self(), target.c_str(), p.state.name.c_str(), p.state_bytes.data(),
                       p.state_bytes.size(), &e),
          e, what);
  }
  if (rank_ == 0) {
    const std::string state = state_.precision ? state_.precision->save_state() : std::string();
    p.precision = {"precision.bin",
                   static_cast<int64_t>(state.size()),
                   crc32c(state.data(), state.size()),
                   {}};
    check(table_->save(writer_->self(), target.c_str(), "precision.bin", state.data(), state.size(),
                       &e),
          e, what);
  }
}

void Checkpointer::commit() {
  std::unique_ptr<Pending> p = std::move(pending_);
  const std::string name = step_name(p->step);
  const fs::path tmp = root_ / (name + ".tmp"), final_dir = root_ / name;
  loom_error e;
  check(table_->finish(writer_->self(), &e), e,
        "checkpoint " + name + " (the previous one is intact)");
  if (!p->mine.parts.empty() || !p->state.name.empty()) {
    Manifest one;  // a manifest of this rank's files alone, read back and merged by rank 0
    one.shapes = p->shapes;
    if (!p->mine.parts.empty()) {
      p->mine.crc32c = p->crc.get();
      one.files.push_back(p->mine);
    }
    if (!p->state.name.empty()) one.files.push_back(p->state);
    for (const File& f : one.files) verify_written(tmp, f);
    write_json(tmp / rank_file(rank_, "json"), one);
  }
  if (rank_ == 0 && !p->precision.name.empty()) verify_written(tmp, p->precision);
  barrier();  // every rank's bytes and note are durable
  if (rank_ == 0) {
    Manifest man;
    man.step = p->step;
    man.applied = p->applied;
    man.layout = layout();
    man.precision = precision_name_;
    man.precision_state = p->precision;
    man.shapes = p->shapes;
    man.config = config_text_;
    man.plugins = plugins_;
    for (int r = 0; r < mesh_.world(); ++r) {
      const fs::path note = tmp / rank_file(r, "json");
      if (!fs::exists(note)) continue;
      Manifest theirs = read_manifest(tmp, note.filename().string());
      man.files.insert(man.files.end(), theirs.files.begin(), theirs.files.end());
      man.shapes.insert(theirs.shapes.begin(),
                        theirs.shapes.end());  // other pipeline stages' tensors
      fs::remove(note);
    }
    check_coverage(tmp,
                   man);  // a rank's note missing would leave a tensor short: never publish that
    check_written(tmp,
                  man);  // a writer that wrote nothing, or elsewhere, or short: never publish that
    write_json(tmp / "manifest.json", man);
    sync_dir(tmp);
    // A checkpoint of this step from an earlier run (resumed from an older one) is moved aside,
    // not deleted, until the new one and `latest` are in place.
    if (fs::exists(final_dir)) fs::rename(final_dir, final_dir.string() + ".deleting");
    fs::rename(tmp, final_dir);
    sync_dir(root_);
    write_durable(root_ / "latest", name + "\n");
    sync_dir(root_);
    retire_old(final_dir);
    std::printf("checkpoint %s committed (%zu files)\n", final_dir.c_str(), man.files.size() + 1);
    std::fflush(stdout);
  }
  barrier();
  if (table_->committed)
    check(table_->committed(writer_->self(), final_dir.c_str(), p->step, &e), e,
          "checkpoint " + name + " commit notice");
}

// Retention: the oldest committed checkpoints beyond keep_last go; the newest never does.
void Checkpointer::retire_old(const fs::path& final_dir) {
  if (cleanup_.valid()) cleanup_.get();  // the previous deletions are done
  std::vector<fs::path> done, drop;
  for (const auto& entry : fs::directory_iterator(root_)) {
    // Only what this writer names (step-NNNNNNNN, and .deleting while it goes): a user's
    // step-00000005-keep beside them is not a checkpoint to retire.
    const std::string name_here = entry.path().filename().string();
    if (!entry.is_directory() || !is_step_name(entry.path().stem().string())) continue;
    if (name_here == entry.path().stem().string()) done.push_back(entry.path());
    if (entry.path().extension() == ".deleting")
      drop.push_back(entry.path());  // incl. a crash's leftovers
  }
  std::sort(done.begin(), done.end());
  for (size_t i = 0; i + keep_last_ < done.size(); ++i)
    if (done[i] != final_dir) drop.push_back(done[i]);
  // Deleting gigabytes takes a while: rename out of the step-* namespace now (so nothing
  // reads them as checkpoints), delete in the background, finished before the next commit.
  for (auto& d : drop) {
    if (d.extension() == ".deleting") continue;
    const fs::path gone = d.string() + ".deleting";
    fs::rename(d, gone);
    d = gone;
  }
  cleanup_ = std::async(std::launch::async, [drop] {
    std::error_code ec;
    for (const auto& d : drop) fs::remove_all(d, ec);
  });
}

// The data plugin's state is per rank of one layout: it comes back only when this run has the
// same layout and the same data plugin; otherwise the plugin starts afresh, and says so.
void Checkpointer::load_plugin_state(const fs::path& dir, const Manifest& man,
                                     const Reader& reader) {
  std::vector<const File*> states;
  for (const File& f : man.files)
    if (f.name.rfind("data-state-", 0) == 0) states.push_back(&f);
  std::string saved_by;
  for (const auto& p : man.plugins)
    if (p.count("slot") && p.at("slot") == "data" && p.count("name")) saved_by = p.at("name");
  if (states.empty()) return;
  const std::string why =
      saved_by != state_.plugin.plugin
          ? "this run does not use (its data plugin is '" + state_.plugin.plugin + "')"
      : !state_.plugin.load    ? "this run's build of it cannot load"
      : man.layout != layout() ? "was saved under another layout"
                               : "";
  if (!why.empty()) {
    if (rank_ == 0)
      std::printf(
          "note: %s holds %zu rank(s)' state of data plugin '%s', which %s; it starts afresh\n",
          dir.c_str(), states.size(), saved_by.c_str(), why.c_str());
    return;
  }
  for (const File* f : states)
    if (f->name == data_state_file(rank_)) {
      const std::vector<char> bytes = reader.read(dir, f->name);
      state_.plugin.load(std::string(bytes.begin(), bytes.end()));
    }
}

void Checkpointer::close() {
  if (pending_) commit();
  if (cleanup_.valid()) cleanup_.get();
}

}  // namespace loom::ckpt
