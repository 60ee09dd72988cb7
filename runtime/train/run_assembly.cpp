#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ckpt/checkpoint_settings.hpp"
#include "ckpt/init_from.hpp"
#include "core/cpus.hpp"
#include "core/errors.hpp"
#include "data/data_settings.hpp"
#include "data/shards.hpp"
#include "distributed/parallel_settings.hpp"
#include "loader/plugin_settings.hpp"
#include "loader/services.hpp"
#include "ops/ops.hpp"
#include "parallel/context_attention.hpp"
#include "parallel/layer_api.hpp"
#include "tensor/host_blocks.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/context_positions.hpp"
#include "train/data_check.hpp"
#include "train/layout_rules.hpp"
#include "train/report_fields.hpp"
#include "train/run.hpp"
#include "train/run_dir.hpp"
#include "train/sample.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

// Tells plugins where they run (the loom.placement service), before any is created.
void publish_placement(const dist::RankEnv& env, const dist::MeshShape& mesh) {
  loom_placement p{};
  p.rank = env.rank, p.world = env.world, p.local_rank = env.local_rank,
  p.local_world = env.local_world;
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
    throw ConfigError(
        zero +
        " with [faults] perturb_step: zero3 holds each parameter once over dp, so there is "
        "no replica for a perturbed rank to drift from; use zero1, zero2 or ddp to test replica "
        "checks");
  if (faults.perturb_step > 0 && (check_every == 0 || faults.perturb_step % check_every != 0))
    throw ConfigError(
        zero + " with [faults] perturb_step = " + std::to_string(faults.perturb_step) +
        ": every step rebuilds the whole parameters from the shards, so a perturbed replica lives "
        "only "
        "until the next all-gather; set [stability] check_every to a divisor of perturb_step");
}

}  // namespace

Run::Run(const JobSettings& job, const plugins::Selection& selection, const dist::RankEnv& env,
         const fs::path& run_dir)
    : job_(job), sel_(selection), env_(env), run_dir_(run_dir), lead_(env.rank == 0) {
  check_and_settle();
  start_devices();
  start_precision();
  open_data();
  start_processes();
  build_model();
  start_data_slot();
  start_optimizer_and_checkpoints();
  if (first_step_ > last_step_)
    return;  // resumed at or past the end: train() says so, writes nothing
  start_reporters();
  print_banner();
}

Run::~Run() {
  plugins::set_span_sink({});
}  // the trace goes with the run; plugins' spans stop first

// Everything every rank would refuse, before anything is started or written.
void Run::check_and_settle() {
  mesh_ = dist::resolve_mesh(job_.parallel, env_.world);
  s_ = settle_layout(job_, sel_, mesh_);
  // The data, as `config check` checks it, after the layout as there. A local launcher checked it
  // once for the ranks it started; a rank srun or mpirun started checks it itself.
  if (!std::getenv("LOOM_LAUNCHED")) check_data(job_);
  local_batch_ = s_.micro_batch * s_.accum;  // sequences per rank per step
  plugins::start_steps(s_.seed, static_cast<int32_t>(s_.accum));
  if (lead_) claim_run_dir(run_dir_, job_.checkpoint);  // before anything is written there
  publish_placement(env_, mesh_);
  tokenizer_ = run_tokenizer(job_.data, job_.model, s_.sample_every > 0);
}

// Ranks on one machine share its cores unless told otherwise; [run] threads = 0 on one rank per
// machine: all the cores it may use while they are free, fewer while other processes take some.
// "May use" is what a scheduler allows: the affinity mask, a cgroup quota, --cpus-per-task.
void Run::start_devices() {
  device_ = job_.run.device;
  ops_ = ops::for_device(device_);
  ops::set_memory_cap(device_, job_.run.device_memory);
  plugins::set_device_ops(ops_);
  plugins::set_native_streams(ops::native_streams(device_));
  host_blocks::share_memory(env_.local_world);
  threads_ = job_.run.threads;
  if (threads_ == 0) {
    const CpuBudget budget = threads_per_rank(env_.local_world, env_.launcher == "slurm");
    threads_ = budget.cpus;
    threads_from_ = " (" + budget.source + ")";
  }
  threads_ = ops::set_threads(device_, threads_);
  thread_policy_ = std::make_unique<ThreadPolicy>(
      device_, threads_, device_ == "cpu" && job_.run.threads == 0 && env_.local_world == 1, lead_);
}

// The precision slot decides GEMM operand numerics and loss scaling.
void Run::start_precision() {
  if (const plugins::SlotChoice* p = sel_.slot("precision")) {
    loom_options opts = p->options;
    precision_ = std::make_unique<Precision>(p->found, &opts, ops_);
  }
}

void Run::open_data() {
  const data::DataSettings& ds = job_.data;
  std::vector<data::Source> sources;
  for (const auto& d : ds.sources()) {
    data::Source s;
    s.name = d.name, s.weight = d.weight;
    s.train = data::TokenSplit(d.dir, "train", job_.model.vocab_size);
    if (s_.eval_every > 0 && d.weight > 0) {
      s.val = data::TokenSplit(d.dir, "val", job_.model.vocab_size);
      if (s.val.size() <= job_.model.seq_len)
        throw RuntimeError("the validation split in '" + d.dir + "' is shorter than one sequence");
    }
    sources.push_back(std::move(s));
  }
  data_ = std::make_unique<data::Batches>(std::move(sources), job_.model.seq_len, s_.seed,
                                          data::sampling_from(ds.sampling), s_.global_batch);
  if (const char* dir = std::getenv("LOOM_DATA_TRACE")) {
    const fs::path file = fs::path(dir) / ("rank" + std::to_string(env_.rank) + ".tsv");
    data_trace_.reset(std::fopen(file.c_str(), "a"));
    if (!data_trace_)
      throw RuntimeError("LOOM_DATA_TRACE: cannot open '" + file.string() + "'" + os_reason());
  }
}

// The comm world, where each rank runs, and the links between hosts.
void Run::start_processes() {
  if (env_.world == 1) return;
  const plugins::SlotChoice* comm = sel_.slot("comm");
  if (!comm) throw RuntimeError("several ranks without a comm plugin got past layout_problem");
  loom_options comm_opts = comm->options;
  const dist::ParallelSettings& par = job_.parallel;
  const dist::InterfaceChoice nic =
      dist::network_interface(par.interface, env_, comm->found.desc->name);
  world_ =
      std::make_unique<dist::CommWorld>(env_, mesh_, comm->found, &comm_opts, par.timeout_s * 1000);
  hosts_ = gather_hosts(*world_, nic);
  hosts_.line += " (interface from " + nic.source + ")";
  links_ = probe_links(*world_, hosts_);
  first_sample_ = world_->batch_rank() * local_batch_;
}

// The tensor slots decide how parameters are sharded; the pipeline layout which layers this
// rank builds. A sample reruns its whole context where no KV cache serves it (sequence
// parallelism splits a decode's rows, a pipeline's stages hold no cache): under cp the
// activations then also hold one full-length sequence.
void Run::build_model() {
  slots_ = std::make_unique<TensorSlots>(job_.model, job_.run.device, sel_, world_.get(), ops_,
                                         GemmNumerics{precision_.get()});
  const ContextAttention* cp = slots_->context();
  T_ = job_.model.seq_len;
  T_local_ = cp ? cp->local_len() : T_;
  const bool full_context_samples =
      cp && s_.sample_every > 0 && (sel_.slot("sequence") || mesh_.pp > 1);
  max_rows_ = std::max(s_.micro_batch * T_local_, full_context_samples ? T_ : int64_t{0});
  if (full_context_samples && lead_)
    std::printf(
        "note: text samples under cp with %s keep activations for one whole sequence (%lld rows) "
        "besides the "
        "micro-batch's %lld; sample_every = 0 frees them\n",
        mesh_.pp > 1 ? "pp" : "sequence parallelism", (long long)T_,
        (long long)(s_.micro_batch * T_local_));
  PipelineLayout layout;
  std::vector<int> only;
  if (mesh_.pp > 1) {
    layout = plan_pipeline(job_.parallel, sel_, job_.model, mesh_.pp, static_cast<int>(s_.accum));
    only = layout.layers_of(world_->coord().pp, mesh_.pp);
  }
  model_ =
      model::build(job_.model, slots_->api(), params_, max_rows_, job_.run.profile_layer, only);
  if (mesh_.pp > 1)
    pipe_ = std::make_unique<Pipeline>(std::move(layout), *world_, *model_, max_rows_);
  params_.allocate(s_.seed);
  const std::string& src = job_.init_from;
  if (!src.empty() && job_.checkpoint.may_start_fresh())
    ckpt::init_from(
        src, params_,
        lead_);  // before the data plugin copies (and shards) the values; a resume overwrites
  tok_.assign(s_.micro_batch * T_, 0);
  tgt_.assign(s_.micro_batch * T_, 0);
  offsets_.assign(s_.global_batch, 0);
}

void Run::start_data_slot() {
  faults_ = std::make_unique<FaultInjector>(job_.faults, env_.rank, job_.model.vocab_size, params_);
  if (mesh_.data_ranks() == 1) return;
  const std::vector<std::string> own_unit = pipe_ && job_.model.tied_embeddings
                                                ? std::vector<std::string>{"wte"}
                                                : std::vector<std::string>{};
  dp_ = std::make_unique<DataParallel>(
      sel_, *world_, params_, *model_, static_cast<int>(s_.accum), own_unit,
      [this](const std::vector<Param*>& ps) { on_grads_final(ps); });
  if (dp_->sharded()) {
    const StabilitySettings& st = job_.stability;
    check_sharded(faults_->faults(), dp_->zero_stage(), st.enabled ? st.check_every : 0);
  }
}

void Run::start_optimizer_and_checkpoints() {
  optimizer_ =
      std::make_unique<Optimizer>(params_, *slots_, dp_.get(), ops_,
                                  AdamW{s_.beta1, s_.beta2, s_.eps, s_.weight_decay, s_.grad_clip});
  ckpt::CheckpointerSetup setup;
  setup.settings = job_.checkpoint;
  setup.precision = job_.plugins.slot("precision");
  setup.model = job_.model, setup.selection = &sel_;
  if (const plugins::SlotChoice* writer = sel_.slot("ckpt")) setup.writer_options = writer->options;
  setup.world = world_.get(), setup.mesh = mesh_, setup.rank = env_.rank, setup.run_dir = run_dir_;
  setup.config_text = job_.text, setup.write_error_step = faults_->faults().ckpt_write_error_step;
  ckpt::TrainingState state = optimizer_->checkpoint_state();
  state.precision = precision_.get();
  checkpoints_ = std::make_unique<ckpt::Checkpointer>(std::move(setup), std::move(state));
  first_step_ = checkpoints_->resume();
  last_step_ = s_.exit_after > 0 ? std::min(s_.exit_after, s_.steps) : s_.steps;
  if (first_step_ <= last_step_ && replica_checks())
    optimizer_->check_replicas(first_step_ > 1 ? "after resuming" : "at initialisation");
}

// What rank 0 writes beside the metrics, the trace, the stability watch, and each slot's
// metrics for the step line.
void Run::start_reporters() {
  if (lead_) {
    fs::create_directories(run_dir_);
    write_checked(run_dir_ / "config.toml", job_.text);
    write_plugins_record(run_dir_, sel_);
    if (!links_.empty()) write_links(run_dir_, hosts_.of_rank[0], links_);
    superseded_rows_ = first_step_ > 1 ? drop_rows_from(run_dir_ / "metrics.jsonl", first_step_,
                                                        run_dir_ / "metrics.superseded.jsonl")
                                       : 0;
    log_ =
        std::make_unique<MetricsLog>(run_dir_ / "metrics.jsonl", first_step_ > 1,
                                     job_.run.tensorboard ? run_dir_ / "tensorboard" : fs::path());
  }
  peak_ = device_peak(device_, precision_ ? precision_->name() : "fp32",
                      precision_ && precision_->bf16_gemms(), threads_, job_.run.peak_gflops);
  flops_per_token_ = job_.model.flops_per_token();
  activation_bytes_ = model_->activation_bytes({nullptr, nullptr, s_.micro_batch, T_local_, 0.f});
  stability_ = std::make_unique<Stability>(job_.stability, world_.get(), dp_.get(), lead_, run_dir_,
                                           first_step_ > 1);
  // Where this run took over: metrics.jsonl's rows past it were the stopped run's.
  if (first_step_ > 1)
    stability_->log({first_step_ - 1,
                     "run",
                     "resume",
                     {{"superseded_rows", std::to_string(superseded_rows_)}}});
  reporters_.push_back([this](Fields& f) { stability_->add_metrics(f); });
  reporters_.push_back([this](Fields& f) {
    add_memory_metrics(f, optimizer_->accounting(), ops::device_peak_since_mark(device_));
  });
  SumOverData sum_over_data;
  if (mesh_.data_ranks() > 1)
    sum_over_data = [this](double* v, int64_t n) {
      world_->data().all_reduce(flat_view(v, LOOM_F64, n), LOOM_REDUCE_SUM);
    };
  reporters_.push_back([this, sum_over_data](Fields& f) {
    add_moe_metrics(f, *model_, mesh_.ep > 1, sum_over_data);
  });
  if (precision_)
    reporters_.push_back([this](Fields& f) {
      for (auto& kv : precision_->metrics()) f.push_back(kv);
    });
  ContextAttention* cp = slots_->context();
  if (cp) reporters_.push_back([this, cp](Fields& f) { add_context_metrics(f, cp, world_.get()); });
  // Last: nothing after it may throw, or the plugins' span sink would outlive the trace.
  if (job_.run.trace) {
    trace_ = std::make_unique<Trace>(
        run_dir_ / "trace" / ("rank" + std::to_string(env_.rank) + ".json"), env_.rank,
        "rank " + std::to_string(env_.rank) + " (" + mesh_.describe() + " coord pp " +
            std::to_string(world_ ? world_->coord().pp : 0) + ")");
    plugins::set_span_sink([t = trace_.get()](const std::string& name, const std::string& category,
                                              Clock::time_point b, Clock::time_point e) {
      t->span(name, category, b, e);
    });
  }
}

// Said once, at start-up: whether bf16 has its speed here, or only its rounding.
std::string Run::bf16_gemms_line() const {
  if (precision_->bf16_gemms()) {
    const std::string isa = ops::bf16_gemm_instructions(device_);
    return "precision: bf16 GEMM operands stored in 16 bits and multiplied on " +
           (isa.empty() ? "the device's own bf16 instructions" : isa) + ", accumulating in fp32";
  }
  if (precision_->bf16_storage())
    return "precision: this device has no bf16 GEMM instructions (the CPU's AMX, through oneDNN; "
           "AVX512-BF16 alone is slower than fp32 there): bf16 operands and activations are "
           "stored in 16 bits (half the memory) and widened to fp32 for each GEMM (the same "
           "values, at fp32's speed)";
  const std::string emulated =
      "bf16 is emulated, each GEMM operand rounded to bf16 in fp32 storage and multiplied in fp32 "
      "(the same values, at fp32's speed and memory)";
  if (device_ == "cuda")
    return "precision: bf16 GEMMs on CUDA (cuBLASLt) are not built yet: " + emulated;
  return "precision: this device's op table takes no bf16 GEMM operands: " + emulated;
}

void Run::print_banner() const {
  if (!lead_) return;
  std::printf("model: %s: %s params (%s non-embedding)\n", job_.model.describe().c_str(),
              human_count(job_.model.params()).c_str(),
              human_count(job_.model.non_embedding_params()).c_str());
  std::printf(
      "data: %s training tokens from %s; batch %lld x %lld tokens (%lld micro-batches of %lld)\n",
      human_count(data_->train_tokens()).c_str(), job_.data.describe().c_str(),
      (long long)s_.global_batch, (long long)job_.model.seq_len, (long long)s_.accum,
      (long long)s_.micro_batch);
  std::printf("device: %s, %d threads%s, precision %s; MFU peak %.1f GFLOP/s from %s\n",
              device_.c_str(), threads_, device_ == "cpu" ? threads_from_.c_str() : "",
              precision_ ? precision_->name() : "fp32", peak_.gflops, peak_.source.c_str());
  if (precision_ && precision_->compute_dtype() == LOOM_BF16 && !precision_->exact())
    std::printf("%s\n", bf16_gemms_line().c_str());
  if (world_) {
    std::printf("mesh: %d ranks (launched by %s), %s, %lld sequences per rank per step\n",
                env_.world, env_.launcher.c_str(), mesh_.describe().c_str(),
                (long long)local_batch_);
    std::printf("hosts: %s\n", hosts_.line.c_str());
  }
  if (!links_.empty())
    std::printf("links to %s: %s\n", hosts_.of_rank[0].c_str(), describe_links(links_).c_str());
  if (pipe_) std::printf("pipeline: %s\n", pipe_->describe().c_str());
  if (!dp_ && sel_.slot("data") && std::string(sel_.slot("data")->found.desc->name) != "ddp")
    std::printf("note: [plugins] data = \"%s\" has nothing to shard or reduce with dp = 1\n",
                sel_.slot("data")->found.desc->name);
  std::printf("run dir: %s\n", run_dir_.c_str());
  std::fflush(stdout);
}

}  // namespace loom::train
