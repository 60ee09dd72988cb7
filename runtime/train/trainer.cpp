#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>
#include <tuple>

#include "ckpt/checkpointer.hpp"
#include "ckpt/init_from.hpp"
#include "core/errors.hpp"
#include "core/json.hpp"
#include "loader/services.hpp"
#include "core/nearest.hpp"
#include "data/batches.hpp"
#include "data/shards.hpp"
#include "gpt/gpt.hpp"
#include "ops/ops.hpp"
#include "parallel/context_attention.hpp"
#include "tokenizer/tokenizer.hpp"
#include "train/data_parallel.hpp"
#include "train/tensor_slots.hpp"
#include "train/metrics.hpp"
#include "train/peak.hpp"
#include "train/pipeline.hpp"
#include "train/trace.hpp"
#include "train/hosts.hpp"
#include "train/trainer_parts.hpp"
#include "train/sample.hpp"
#include "train/schedule.hpp"
#include "train/stop_signal.hpp"
#include "train/thread_policy.hpp"
#include "train/stability.hpp"

namespace fs = std::filesystem;

namespace loom::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string human(double x) {
  char b[32];
  if (x >= 1e6)
    std::snprintf(b, sizeof b, "%.2fM", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(b, sizeof b, "%.1fk", x / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", x);
  return b;
}

// Block 0's segments per micro-batch, averaged over the run (first step included).
void print_profile(const SegmentProfile& p, int64_t microbatches) {
  double total = 0;
  for (const auto& r : p.rows()) total += r.ms;
  std::printf("block0 profile, per micro-batch (averaged over %lld):\n", (long long)microbatches);
  std::printf("  %-20s %10s %7s %12s %14s\n", "segment", "ms", "share", "collectives", "bytes moved");
  for (const auto& r : p.rows())
    std::printf("  %-20s %10.3f %6.1f%% %12.1f %14.0f\n", r.name.c_str(), r.ms / microbatches,
                100 * r.ms / total, double(r.collectives) / microbatches, double(r.bytes) / microbatches);
  std::printf("  %-20s %10.3f\n", "total", total / microbatches);
}

}  // namespace

void check_layout(const config::Config& cfg, const plugins::Selection& selection, const dist::MeshShape& mesh) {
  Settings s = read_settings(cfg);
  check_experts(gpt::from_config(cfg), mesh);
  check_context(selection, mesh);
  check_data_capabilities(selection, mesh);
  split_batch(s, mesh);
  if (mesh.pp > 1) plan_pipeline(cfg, selection, gpt::from_config(cfg), mesh.pp, static_cast<int>(s.accum));
}

fs::path default_run_dir(const config::Config& cfg) {
  std::string dir = cfg.str("run.dir");
  if (!dir.empty()) return dir;
  std::string name = cfg.str("run.name");
  return fs::path("runs") / (name.empty() ? cfg.stem() : name);
}

TrainSummary train(config::Config& cfg, const plugins::Selection& selection,
                   const dist::RankEnv& env, const fs::path& run_dir) {
  Settings s = read_settings(cfg);
  const gpt::GptConfig mc = gpt::from_config(cfg);
  const dist::MeshShape mesh = dist::resolve_mesh(cfg, env.world);
  check_experts(mc, mesh);
  check_context(selection, mesh);
  check_data_capabilities(selection, mesh);
  const int64_t local_batch = split_batch(s, mesh);
  if (env.rank == 0) lock_run_dir(run_dir);  // before anything is written there
  publish_placement(env, mesh);
  const std::unique_ptr<tok::Tokenizer> tokenizer = run_tokenizer(cfg, mc, s.sample_every > 0);
  const bool lead = env.rank == 0;
  const std::string device = cfg.str("run.device");
  const loom_ops* ops = ops::for_device(device);
  // Ranks on one machine share its cores unless told otherwise.
  int threads = static_cast<int>(cfg.i64("run.threads"));
  if (threads == 0 && env.local_world > 1)
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world);
  threads = ops::set_threads(device, threads);
  // [run] threads = 0 on one rank per machine: all cores while they are free, fewer while other
  // processes take some (train/thread_policy.hpp).
  ThreadPolicy thread_policy(device, threads, device == "cpu" && cfg.i64("run.threads") == 0 && env.local_world == 1,
                             lead);

  // The precision slot decides GEMM operand numerics and loss scaling.
  std::unique_ptr<Precision> precision;
  if (const plugins::SlotChoice* p = selection.slot("precision")) {
    loom_options opts = plugins::options_for(cfg, p->found.desc->name);
    precision = std::make_unique<Precision>(p->found, &opts, ops);
  }
  const GemmNumerics numerics{precision.get()};
  const std::string precision_name = precision ? precision->name() : "fp32";

  fs::path data_dir = cfg.str("data.dir");
  data::Batches data(data::TokenSplit(data_dir, "train", mc.vocab_size),
                     s.eval_every > 0 ? data::TokenSplit(data_dir, "val", mc.vocab_size) : data::TokenSplit{},
                     mc.seq_len, s.seed, data::sampling_from(cfg.str("data.sampling")), s.global_batch);
  if (s.eval_every > 0 && data.val_windows() == 0)
    throw RuntimeError("the validation split in '" + data_dir.string() +
                       "' is shorter than one sequence");

  // Processes first: the tensor slot decides how parameters are sharded.
  std::unique_ptr<dist::CommWorld> world;
  Hosts hosts;
  std::vector<Link> links;  // rank 0's only
  if (env.world > 1) {
    const plugins::SlotChoice* comm = selection.slot("comm");
    if (!comm) throw ConfigError("a run over " + std::to_string(env.world) + " ranks needs [plugins] comm");
    loom_options comm_opts = plugins::options_for(cfg, comm->found.desc->name);
    const dist::InterfaceChoice nic = dist::network_interface(cfg.str("parallel.interface"), env, comm->found.desc->name);
    world = std::make_unique<dist::CommWorld>(env, mesh, comm->found, &comm_opts,
                                              cfg.i64("parallel.timeout_s") * 1000);
    hosts = gather_hosts(*world, nic);
    hosts.line += " (interface from " + nic.source + ")";
    links = probe_links(*world, hosts);
  }
  TensorSlots slots(cfg, selection, world.get(), ops, numerics);
  LayerApi& api = slots.api();
  ParamStore params;
  const bool profile = cfg.boolean("run.profile_layer");
  std::unique_ptr<Pipeline> pipe;  // pp > 1: this rank builds and runs its stage's layers
  if (mesh.pp > 1) pipe = std::make_unique<Pipeline>(cfg, selection, *world, mc, static_cast<int>(s.accum));
  ContextAttention* cp = slots.context();
  const int64_t T_local = cp ? cp->local_len() : mc.seq_len;  // positions of each sequence held here
  // A sample reruns its whole context where no KV cache serves it (sequence parallelism splits a
  // decode's rows, a pipeline's stages hold no cache): under cp the activations then also hold
  // one full-length sequence.
  const bool full_context_samples = cp && s.sample_every > 0 && (selection.slot("sequence") || mesh.pp > 1);
  const int64_t max_rows = std::max(s.micro_batch * T_local, full_context_samples ? mc.seq_len : int64_t{0});
  if (full_context_samples && lead)
    std::printf("note: text samples under cp with %s keep activations for one whole sequence (%lld rows) besides the "
                "micro-batch's %lld; sample_every = 0 frees them\n",
                mesh.pp > 1 ? "pp" : "sequence parallelism", (long long)mc.seq_len, (long long)(s.micro_batch * T_local));
  gpt::Gpt model(mc, api, params, max_rows, profile, pipe ? pipe->layers() : std::vector<int>{});
  if (pipe) pipe->bind(model, max_rows);
  params.allocate(s.seed);
  if (const std::string src = cfg.str("model.init_from"); !src.empty() && (cfg.str("checkpoint.resume").empty() || cfg.str("checkpoint.resume") == "auto"))
    ckpt::init_from(src, params, lead);  // before the data plugin copies (and shards) the values; a resume overwrites
  std::unique_ptr<DataParallel> dp;
  if (mesh.dp * mesh.ep * mesh.cp > 1)
    dp = std::make_unique<DataParallel>(cfg, selection, *world, params, model, static_cast<int>(s.accum),
                                        pipe && mc.tied_embeddings ? std::vector<std::string>{"wte"} : std::vector<std::string>{});
  const bool sharded = dp && dp->sharded();  // ZeRO: the data plugin holds the model state
  if (dp && !model.moe_layers().empty()) {  // MoE routing sees the whole micro-batch across dp x ep
    dist::Communicator& group = world->data();
    api.set_token_group({dp->data_rank(), dp->data_size(), [&group](const double* mine, double* all, int64_t n) {
                           group.all_gather(flat_view(const_cast<double*>(mine), LOOM_F64, n),
                                            flat_view(all, LOOM_F64, n * group.size()));
                         }});
  }
  // AdamW moments, here unless the data plugin shards them.
  Tensor m = sharded ? Tensor() : Tensor::zeros({params.numel()}), v = sharded ? Tensor() : Tensor::zeros({params.numel()});
  const Faults faults = Faults::from(cfg);
  if (sharded) check_sharded(selection, faults, dp->zero_stage(), device);
  ckpt::Checkpointer checkpoints(cfg, selection, world.get(), mesh, env.rank, run_dir, cfg.render(selection.schemas),
                                 faults.ckpt_write_error_step);
  if (sharded) checkpoints.use_shards({[&] { return dp->shard_pieces(); }, [&] { dp->pieces_loaded(); }});
  if (dp && dp->has_state())
    checkpoints.use_plugin_state({dp->name(), [&] { return dp->save_state(); }, [&](const std::string& s) { dp->load_state(s); }});
  int64_t applied = 0;  // optimizer steps taken: a skipped step does not advance AdamW
  const int64_t first_step = checkpoints.resume(params, m, v, precision.get(), applied);
  const int64_t exit_after = cfg.i64("train.exit_after");
  const int64_t last_step = exit_after > 0 ? std::min(exit_after, s.steps) : s.steps;
  if (first_step > last_step) {  // resumed at or past the end: nothing to train, nothing to write
    if (lead)
      std::printf("nothing to do: the checkpoint has step %lld done and the run ends at step %lld ([train] steps%s)\n",
                  (long long)(first_step - 1), (long long)last_step, exit_after > 0 ? " or exit_after" : "");
    if (world) world->world().barrier();
    return TrainSummary{};
  }
  if (dp && !sharded) dp->check_identical(params, first_step > 1 ? "after resuming" : "at initialisation");
  const int64_t first_sample = world ? world->batch_rank() * local_batch : 0;

  std::unique_ptr<MetricsLog> log;
  if (lead) {
    fs::create_directories(run_dir);
    write_checked(run_dir / "config.toml", cfg.render(selection.schemas));
    write_plugins_record(run_dir, selection);
    if (!links.empty()) write_links(run_dir, hosts.of_rank[0], links);
    log = std::make_unique<MetricsLog>(run_dir / "metrics.jsonl", first_step > 1);
  }
  Peak peak = device_peak(device, precision_name, threads, cfg.f64("run.peak_gflops"));
  const double flops_per_token = mc.flops_per_token();

  if (lead) {
    std::printf("model: %s: %s params (%s non-embedding)\n", mc.describe().c_str(), human(mc.params()).c_str(),
                human(mc.non_embedding_params()).c_str());
    std::printf(
        "data: %s training tokens from %s; batch %lld x %lld tokens (%lld micro-batches of "
        "%lld)\n",
        human(data.train_tokens()).c_str(), data_dir.c_str(), (long long)s.global_batch,
        (long long)mc.seq_len, (long long)s.accum, (long long)s.micro_batch);
    std::printf("device: %s, %d threads, precision %s; MFU peak %.1f GFLOP/s from %s\n",
                device.c_str(), threads, precision_name.c_str(), peak.gflops, peak.source.c_str());
    if (world)
      std::printf("mesh: %d ranks (launched by %s), %s, %lld sequences per rank per step\n", env.world,
                  env.launcher.c_str(), mesh.describe().c_str(), (long long)local_batch);
    if (world) std::printf("hosts: %s\n", hosts.line.c_str());
    if (!links.empty()) std::printf("links to %s: %s\n", hosts.of_rank[0].c_str(), describe_links(links).c_str());
    if (pipe) std::printf("pipeline: %s\n", pipe->describe().c_str());
    if (!dp && selection.slot("data") && std::string(selection.slot("data")->found.desc->name) != "ddp")
      std::printf("note: [plugins] data = \"%s\" has nothing to shard or reduce with dp = 1\n",
                  selection.slot("data")->found.desc->name);
    std::printf("run dir: %s\n", run_dir.c_str());
    std::fflush(stdout);
  }

  const int64_t T = mc.seq_len, tokens_per_step = s.global_batch * T;
  const int64_t activation_bytes = model.activation_bytes({nullptr, nullptr, s.micro_batch, T_local, 0.f});
  std::unique_ptr<Trace> trace;
  if (cfg.boolean("run.trace")) {
    trace = std::make_unique<Trace>(run_dir / "trace" / ("rank" + std::to_string(env.rank) + ".json"), env.rank,
                                    "rank " + std::to_string(env.rank) + " (" + mesh.describe() + " coord pp " +
                                        std::to_string(world ? world->coord().pp : 0) + ")");
    plugins::set_span_sink([t = trace.get()](const std::string& name, const std::string& category, Clock::time_point b,
                                             Clock::time_point e) { t->span(name, category, b, e); });
  }
  struct StopSpans {  // the trace goes when train() returns; plugins' spans stop first
    ~StopSpans() { plugins::set_span_sink({}); }
  } stop_spans;
  std::vector<int32_t> tok(s.micro_batch * T), tgt(s.micro_batch * T);
  TrainSummary sum;
  double total_time = 0;
  Param* nan_param = nullptr;
  if (faults.nan_grad_step > 0) {
    std::vector<std::string> names;
    for (Param& p : params.all()) {
      names.push_back(p.name);
      if (p.name == faults.nan_grad_param) nan_param = &p;
    }
    if (!nan_param)
      throw ConfigError("[faults] nan_grad_param = \"" + faults.nan_grad_param + "\" is not a parameter of this model" +
                        did_you_mean(faults.nan_grad_param, names));
  }
  Stability stability(cfg, world.get(), dp.get(), lead, run_dir, first_step > 1);
  // Mean validation loss per token over the fixed windows, on every rank.
  auto validation_loss = [&] {
    BatchFn val_batch = local_positions(cp, s.micro_batch, [&](int b, int32_t* tokens, int32_t* targets) {
      data.val_batch(b * s.micro_batch, s.micro_batch, tokens, targets);
    });
    // The same eval_batches x global_batch windows under every layout, micro_batch at a time,
    // each rank all of them: the validation loss does not depend on the layout.
    const int64_t chunks = s.eval_batches * s.global_batch / s.micro_batch;
    double val = pipe ? pipe->evaluate(val_batch, static_cast<int>(chunks), s.micro_batch, T_local)
                      : validation_loss_sum(model, val_batch, chunks, s.micro_batch, T_local, tok, tgt);
    if (cp) world->axis(dist::Axis::CP).all_reduce(flat_view(&val, LOOM_F64, 1), LOOM_REDUCE_SUM);
    if (cp) cp->stats();  // evaluation's attention is not a step's
    return val / static_cast<double>(chunks * s.micro_batch * T);
  };
  // Evaluation and samples: every rank holds the same tokens, and MoE routes dropless, so the
  // result does not depend on the layout's micro-batch size. Training: the opposite.
  auto evaluating = [&](bool on) {
    api.use_token_group(!on);
    for (auto& [name, moe] : model.moe_layers()) moe->use_capacity(!on);
  };
  if (s.eval_every > 0 && first_step == 1) {  // as llm.c does: how good the starting weights are
    evaluating(true);
    const double val = validation_loss();
    evaluating(false);
    if (lead) std::printf("step %5d/%lld | val %.4f (before the first update)\n", 0, (long long)s.steps, val);
    if (lead) log->write({{"step", 0.0}, {"val_loss", val}});
  }
  std::vector<int64_t> offsets(s.global_batch);
  StopSignal stop_signal;
  const bool save_on_signal = cfg.str("checkpoint.on_signal") == "save" && checkpoints.enabled();
  for (int64_t step = first_step; step <= last_step; ++step) {
    auto t0 = Clock::now();
    const double lr = s.lr.at(step);
    params.zero_grads();
    for (auto& [name, moe] : model.moe_layers()) moe->reset_stats();
    double loss_sum = 0, comm_ms = 0, exposed_ms = 0;
    // Each rank's loss is the mean over its own tokens; the data slot averages over dp. The loss
    // gradient carries the precision's loss scale, divided out again before clipping.
    const double loss_scale = precision ? precision->loss_scale() : 1.0;
    float dloss = static_cast<float>(loss_scale / static_cast<double>(local_batch * T_local));
    if (step == faults.inf_loss_step && env.rank == faults.inf_loss_rank) dloss = INFINITY;
    BatchFn batch = local_positions(cp, s.micro_batch, [&](int a, int32_t* tokens, int32_t* targets) {
      data.train_batch(step, first_sample + a * s.micro_batch, s.micro_batch, tokens, targets);
      if (step == faults.bad_batch_step)
        for (int64_t i = 0; i < s.micro_batch * T; ++i)
          targets[i] = static_cast<int32_t>((targets[i] * 7 + 13) % mc.vocab_size);
    });
    auto grad_ready = [&](size_t layer) {
      if (dp) dp->after_layer(layer);
    };
    PipeStepStats pipe_stats;
    if (pipe) {
      loss_sum = pipe->train_step(batch, s.micro_batch, T_local, dloss, grad_ready, trace.get(), pipe_stats);
    } else {
      for (int64_t a = 0; a < s.accum; ++a) {
        batch(static_cast<int>(a), tok.data(), tgt.data());
        gpt::Microbatch mb{tok.data(), tgt.data(), s.micro_batch, T_local, dloss};
        const std::string name = std::to_string(a);
        auto f0 = Clock::now();
        loss_sum += model.forward(mb);
        auto b0 = Clock::now();
        model.backward(mb, a + 1 == s.accum ? std::function<void(size_t)>(grad_ready) : nullptr);
        if (trace) trace->span("F" + name, "forward", f0, b0), trace->span("B" + name, "backward", b0, Clock::now());
      }
    }
    double loss = loss_sum / static_cast<double>(local_batch * T_local);
    auto r0 = Clock::now();
    if (dp) {
      std::tie(comm_ms, exposed_ms) = dp->finish();
      loss = dp->mean_over_data(loss);
    }
    if (pipe) pipe->sync_tied(params, dp.get());
    if (trace) trace->span("gradient reduction", "comm", r0, Clock::now());
    api.finish_replicated_grads(params);
    if (step == faults.nan_grad_step) nan_param->grad.f32()[0] = NAN;
    // The gradient norm is reduced over tp and the gradients over dp, so a non-finite value on
    // any rank reaches every rank's norm; with a precision policy the flag is also reduced
    // explicitly, with its per-step stats, in one MAX all-reduce over the world.
    const double grad_norm = (sharded ? slots.norm_of(dp->sum_squares(0)) : slots.grad_norm(params)) / loss_scale;
    const bool found_inf = !std::isfinite(grad_norm) || !std::isfinite(loss);
    bool skip = precision && precision->end_step(found_inf, [&](float* stats, int64_t n) {
      if (world) world->world().all_reduce(flat_view(stats, LOOM_F32, n), LOOM_REDUCE_MAX);
    });
    if (skip) {
      if (lead)
        std::printf("step %lld: gradients overflowed on some rank; update skipped on every rank "
                    "(loss scale now %g)\n", (long long)step, precision->loss_scale());
      stability.log({step, "numeric", "overflow_skip", {{"loss_scale", json_number(precision->loss_scale())}}});
    } else if (found_inf) {
      skip = stability.on_nonfinite(step, loss, grad_norm, params, !sharded);  // or throws
    } else {
      for (int64_t i = 0; i < s.global_batch; ++i) offsets[i] = data.train_offset(step, i);
      skip = stability.on_step(step, loss, grad_norm, offsets, [&] {
        // Sharded gradients are not per layer on any one rank: no breakdown.
        auto norms = sharded ? std::vector<std::pair<std::string, double>>{} : slots.layer_grad_norms(params);
        for (auto& n : norms) n.second /= loss_scale;
        return norms;
      });
    }
    if (skip) {
      ++sum.skipped_steps;
    } else {
      // One pass divides out the loss scale and applies clipping.
      double factor = 1.0 / loss_scale;
      if (s.grad_clip > 0 && grad_norm > s.grad_clip) factor *= s.grad_clip / grad_norm;
      ++applied;
      if (sharded) {  // the data plugin updates its shard
        dp->step({lr, s.beta1, s.beta2, s.eps, s.weight_decay, factor, applied});
      } else {
        if (factor != 1.0) ops->scale(params.grads(), static_cast<float>(factor), params.numel());
        for (auto& p : params.all())
          ops->adamw(p.value.f32(), p.grad.f32(), m.f32() + p.offset, v.f32() + p.offset,
                     p.value.numel(), static_cast<float>(lr), s.beta1, s.beta2, s.eps,
                     p.weight_decay ? s.weight_decay : 0.f, applied);
      }
    }
    if (trace) trace->span("step " + std::to_string(step), "step", t0, Clock::now());
    if (step == faults.perturb_step && env.rank == faults.perturb_rank) params.values()[0] += 1e-3f;
    stability.check(step, params);
    const bool stopping = stop_signal.agreed(world.get());
    // Stopping makes this step the last one, which always saves.
    checkpoints.after_step(step, stopping && save_on_signal ? step : last_step, params, m, v, applied, precision.get());
    if (faults.slow_step > 0) std::this_thread::sleep_for(std::chrono::duration<double>(faults.slow_step * seconds_since(t0)));
    const double step_s = seconds_since(t0);
    total_time += step_s;
    const double tps = tokens_per_step / step_s;
    const double mfu = tps * flops_per_token / (peak.gflops * 1e9 * env.world);
    Memory mem = process_memory();

    std::vector<std::pair<std::string, double>> fields = {
        {"step", double(step)},
        {"loss", loss},
        {"grad_norm", grad_norm},
        {"lr", lr},
        {"tokens_per_s", tps},
        {"mfu", mfu},
        {"step_ms", step_s * 1e3},
        {"mem_bytes", double(mem.rss_bytes)},
        {"peak_mem_bytes", double(mem.peak_bytes)},
        {"device_peak_bytes", double(ops::device_peak_bytes(device))},
        {"comm_ms", comm_ms},
        {"exposed_comm_ms", exposed_ms},
        {"activation_bytes", double(activation_bytes)},
        {"param_norm", sharded ? slots.norm_of(dp->sum_squares(1)) : slots.param_norm(params)},
        {"skipped", skip ? 1.0 : 0.0},
        {"skipped_steps", double(sum.skipped_steps)},
        {"threads", double(threads)}};
    {  // model-state bytes this rank holds (ZeRO's, from the plugin) and bytes it sent
      std::vector<int64_t> acct = dp ? dp->accounting() : std::vector<int64_t>(5, 0);
      if (!sharded) acct[0] = acct[1] = 4 * params.numel(), acct[2] = 8 * params.numel();
      fields.push_back({"param_bytes", double(acct[0])});
      fields.push_back({"grad_bytes", double(acct[1])});
      fields.push_back({"optim_bytes", double(acct[2])});
      fields.push_back({"comm_buffer_bytes", double(acct[3])});
      fields.push_back({"comm_bytes", double(acct[4])});
    }
    for (auto& [name, moe] : model.moe_layers()) {  // this rank's MoE layers over the step
      const gpt::MoeStats& st = moe->stats();
      const double mean = double(st.assignments) / double(st.load.size());
      const int64_t most = *std::max_element(st.load.begin(), st.load.end());
      fields.push_back({"moe." + name + ".load_max_over_mean", mean > 0 ? most / mean : 0.0});
      fields.push_back({"moe." + name + ".dropped", st.assignments ? double(st.dropped) / double(st.assignments) : 0.0});
      fields.push_back({"moe." + name + ".aux", st.forwards ? st.aux / double(st.forwards) : 0.0});
      fields.push_back({"moe." + name + ".z", st.forwards ? st.z / double(st.forwards) : 0.0});
      if (mesh.ep > 1) fields.push_back({"moe." + name + ".all_to_all_ms", st.all_to_all_ms});
      for (size_t e = 0; e < st.load.size(); ++e)
        fields.push_back({"moe." + name + ".load." + std::to_string(e), double(st.load[e])});
    }
    if (pipe) {  // rank 0's: the first stage, which holds the most activations
      fields.push_back({"pipeline_bubble", pipe_stats.bubble()});
      fields.push_back({"pipeline_in_flight", double(pipe_stats.peak_in_flight)});
      fields.push_back({"pipeline_activation_bytes", double(pipe_stats.peak_activation_bytes)});
    }
    if (precision)
      for (auto& kv : precision->metrics()) fields.push_back(kv);
    add_context_metrics(fields, cp, world.get());
    std::string val_text;
    // Every rank evaluates and samples (tensor-parallel layers talk inside forward); rank 0 reports.
    evaluating(true);
    if (s.eval_every > 0 && (step % s.eval_every == 0 || step == s.steps || step == 1)) {
      const double val = validation_loss();
      fields.push_back({"val_loss", val});
      char b[48];
      std::snprintf(b, sizeof b, " | val %.4f", val);
      val_text = b;
      if (sum.first_val_loss < 0) sum.first_val_loss = val;
      sum.final_val_loss = val;
    }
    if (lead) log->write(fields);
    if (!lead) val_text.clear();
    if (step == first_step) sum.first_loss = loss;
    sum.final_loss = loss;
    if (lead && (step % s.log_every == 0 || step == last_step || !val_text.empty()))
      std::printf(
          "step %5lld/%lld | loss %.4f%s | grad %.3f | lr %.2e | %s tok/s | mfu %.1f%% | "
          "%.0f ms | mem %.0f MiB\n",
          (long long)step, (long long)s.steps, loss, val_text.c_str(), grad_norm, lr,
          human(tps).c_str(), mfu * 100, step_s * 1e3, mem.rss_bytes / 1048576.0);
    if (s.sample_every > 0 && (step % s.sample_every == 0 || step == s.steps)) {
      api.set_context(nullptr);  // a sample runs on every cp rank whole, through its KV cache
      std::string text = generate(model, tokenizer.get(), s.sample_prompt,
                                  {s.sample_tokens, 1.0, s.sample_top_k, 1.0, s.seed + step},
                                  pipe ? train::NextLogits([&](const std::vector<int32_t>& ctx) { return pipe->next_logits(ctx); })
                                       : train::NextLogits{});
      api.set_context(cp);
      if (lead)
        std::printf("---- sample at step %lld ----\n%s%s\n----\n", (long long)step,
                    printable(s.sample_prompt).c_str(), printable(text).c_str());
    }
    evaluating(false);
    std::fflush(stdout);
    sum.last_step = step;
    threads = thread_policy.after_step();
    if (stopping) {
      sum.stopped_by = stop_signal.name();
      sum.saved_on_stop = save_on_signal;
      break;
    }
  }
  checkpoints.close();
  if (profile && lead) print_profile(api.profile(), s.steps * s.accum);
  if (!sharded) {
    slots.check_replicated(params);  // norms and row-parallel biases stayed identical across tp
    if (dp) dp->check_identical(params, "at the end of the run");  // every replica applied (or skipped) the same updates
  }
  // Every rank's peak memory, once, for `loom compare` (metrics.jsonl is rank 0's alone).
  double peak_mem = static_cast<double>(process_memory().peak_bytes);
  std::vector<double> peaks(env.world, peak_mem);
  if (world) world->world().all_gather(flat_view(&peak_mem, LOOM_F64, 1), flat_view(peaks.data(), LOOM_F64, env.world));
  if (lead) {
    std::string ranks = "{\"peak_mem_bytes\": [";
    for (int r = 0; r < env.world; ++r) ranks += (r ? ", " : "") + std::to_string(static_cast<int64_t>(peaks[r]));
    write_checked(run_dir / "ranks.json", ranks + "]}\n");
  }
  if (world) world->world().barrier();  // rank 0 hosts the store: leave together
  sum.steps = sum.last_step - first_step + 1;  // this run's, after a resume, an exit or a signal
  sum.tokens_per_s = static_cast<double>(sum.steps * tokens_per_step) / total_time;
  sum.mfu = sum.tokens_per_s * flops_per_token / (peak.gflops * 1e9 * env.world);
  return sum;
}

}  // namespace loom::train
