#include "trainer/run/build.h"

#include "trainer/checkpoint/distributed_checkpoint.h"
#include "trainer/model/flops.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/weights.h"
#include "trainer/parallel/sharding.h"
#include "trainer/run/checkpoint_hook.h"
#include "trainer/run/consistency_hook.h"
#include "trainer/run/fleet_hook.h"
#include "trainer/run/distributed_run.h"
#include "trainer/run/eval_hook.h"
#include "trainer/run/fault_hook.h"
#include "trainer/run/provenance_hook.h"
#include "trainer/run/session_hook.h"
#include "trainer/run/telemetry_hook.h"

#include <spdlog/spdlog.h>

#include <cmath>

namespace hlat {

BuiltRun::BuiltRun(const TrainConfig& config, const TrainOptions& options)
    : parallel_(config.parallel.dp, config.parallel.tp) {
    // Only rank 0 talks: it logs, writes the store and the metrics file, and raises alerts.
    const bool root = parallel_.is_root();
    if (!root) spdlog::set_level(spdlog::level::warn);
    if (parallel_.distributed()) log_layout(parallel_);
    if (parallel_.distributed() && (!options.save_weights.empty() || !options.init_weights.empty()) &&
        parallel_.tp_size() > 1)
        throw std::runtime_error("--init and --save take whole-model weights: not with --tp > 1 (checkpoints load at "
                                 "any layout)");
    set_thread_count(config.run.threads);
    if (options.resume_from == "scratch")
        spdlog::info("resuming from the start (no checkpoint early enough): the run's store record continues");
    else if (!options.resume_from.empty())
        resume_ = Resume{options.resume_from, read_checkpoint_state(options.resume_from)};
    else if (options.resume)
        resume_ = find_resume(config);
    build_trainer(config, options);
    const int first_step = trainer_->next_step();
    recorder_ = std::make_unique<RunRecorder>(config, run_meta(), options.resume || !options.resume_from.empty(),
                                              first_step,
                                              options.metrics_jsonl, root);
    const int total_steps = options.steps > 0 ? options.steps : config.schedule.total_steps;
    context_.reset(new RunContext{config, options, parallel_, *data_, *trainer_, *recorder_, total_steps,
                                  first_step, 0, ""});
    log_banner(*context_, peak_gflops_, peak_measured_);
    if (recorder_->store_enabled()) spdlog::info("store: {} (run \"{}\")", config.run.store, run_name(config));
    const double entropy = data_->heldout_unigram_entropy;
    recorder_->start({{"step", first_step},
                      {"threads", config.run.threads},
                      {"peak_gflops", peak_gflops_},
                      {"peak_measured", peak_measured_},
                      {"flops_per_token", flops_per_token(config.model, config.run.seq_len)},
                      {"parameters", full_parameter_count(config.model)},
                      {"heldout_unigram_entropy", std::isfinite(entropy) ? nlohmann::json(entropy) : nullptr},
                      {"config", detectors::config_for_readers(config_to_json(config))}});
    add_hooks(options);
    if (resume_ && !resume_->state.hooks.is_null()) hooks_.restore(resume_->state.hooks);
}

BuiltRun::~BuiltRun() = default;

// Data (at the resumed position), the trainer, and its weights: a
// checkpoint's, --init's, or freshly initialised.
void BuiltRun::build_trainer(const TrainConfig& config, const TrainOptions& options) {
    std::optional<LoaderState> loader_state;
    if (resume_) loader_state = resume_loader_state(resume_->state, parallel_.dp_rank(), parallel_.dp_size());
    if (!options.skip_batches.empty()) {
        // rewind_skip's relaunch: the batches to skip join the stream's own list.
        if (!loader_state) loader_state = LoaderState{};
        loader_state->skip.insert(loader_state->skip.end(), options.skip_batches.begin(), options.skip_batches.end());
        std::sort(loader_state->skip.begin(), loader_state->skip.end());
        loader_state->skip.erase(std::unique(loader_state->skip.begin(), loader_state->skip.end()),
                                 loader_state->skip.end());
    }
    data_ = std::make_unique<RunData>(
        open_data(config, loader_state, parallel_.dp_rank(), parallel_.dp_size(), options.faults.bad_batches));
    if (resume_) check_resumable(config, resume_->state, *data_, options.allow_data_change, resume_->dir);
    if (resume_ && data_->token_file) data_->token_file->seek(resume_->state.tokens_seen, config.run.seq_len);

    peak_gflops_ = config.run.peak_gflops;
    peak_measured_ = peak_gflops_ <= 0;
    if (peak_measured_) peak_gflops_ = measure_peak_gflops(config.precision.bf16_compute());
    trainer_ = std::make_unique<Trainer>(config, *data_->source, peak_gflops_, &parallel_, options.faults);
    if (resume_) {
        load_distributed_checkpoint(resume_->dir, *trainer_);
        trainer_->set_next_step(resume_->state.step, resume_->state.tokens_seen);
        spdlog::info("resumed from {} at step {} ({} tokens seen)", resume_->dir, resume_->state.step,
                     resume_->state.tokens_seen);
    } else if (!options.init_weights.empty()) {
        load_weights(trainer_->model(), options.init_weights);
        spdlog::info("initial weights from {}", options.init_weights);
    } else {
        init_shard_weights(trainer_->model(), config.run.seed);
    }
}

// What the store keeps of the run beyond its config: the bytes of training
// state this rank allocated per parameter it holds (weights, gradients, the
// bf16 compute copy, the optimizer's moments), the bf16 matmul engine, the
// number of processes, and the activation bytes one rank keeps for backward:
// in all, and of them the stream's (residuals, norms) that sequence
// parallelism splits, and the gather buffers it adds instead.
nlohmann::json BuiltRun::run_meta() const {
    Trainer& t = *trainer_;
    const Model& model = t.model();
    const double bytes = (double)(model.state_bytes() + t.optimizer().state_bytes());
    return {{"bytes_per_param", std::round(100 * bytes / model.num_parameters()) / 100},
            {"bf16_matmul_engine", bf16_matmul_engine_name()},
            {"world_size", parallel_.world_size()},
            {"activation_bytes_per_rank", model.activation_bytes()},
            {"stream_activation_bytes_per_rank", model.stream_activation_bytes()},
            {"sequence_parallel_buffer_bytes", model.sequence_parallel_buffer_bytes()}};
}

// The calling order (step_hook.h): the hooks that measure add their points to
// the step's, then the session hook hands them to the run session (stored and
// detected as one); a checkpoint due before a step is written before a fault
// may kill the process there.
void BuiltRun::add_hooks(const TrainOptions& options) {
    RunContext& run = *context_;
    hooks_.add(std::make_unique<TelemetryHook>(run));
    hooks_.add(std::make_unique<EvalHook>(run));
    hooks_.add(std::make_unique<ConsistencyHook>(run));
    hooks_.add(std::make_unique<FleetHook>(run));
    hooks_.add(std::make_unique<ProvenanceHook>(run));  // before the session: an alert of the step names its batch
    hooks_.add(std::make_unique<SessionHook>(run));
    hooks_.add(std::make_unique<CheckpointHook>(run, hooks_));
    hooks_.add(std::make_unique<FaultHook>(options.faults, parallel_.world_rank(), FaultHook::attempt_from_env()));
    for (const std::shared_ptr<StepHook>& hook : options.extra_hooks) hooks_.add(hook);
    for (const auto& make : options.run_hooks) hooks_.add(make(run));
}

}  // namespace hlat
