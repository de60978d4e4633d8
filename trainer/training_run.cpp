#include "trainer/training_run.h"

#include "trainer/checkpoint.h"
#include "trainer/distributed_checkpoint.h"
#include "trainer/distributed_run.h"
#include "trainer/parallel.h"
#include "trainer/process_faults.h"
#include "trainer/sharding.h"
#include "trainer/dataset.h"
#include "trainer/flops.h"
#include "trainer/kernels_bf16.h"
#include "detectors/detector.h"
#include "detectors/webhook.h"
#include "trainer/leak_probe.h"
#include "trainer/loader.h"
#include "trainer/run_telemetry.h"
#include "trainer/token_file.h"
#include "trainer/tokenizer.h"
#include "trainer/trainer.h"
#include "trainer/weights.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <optional>

namespace hlat {
namespace {

std::string format_duration(double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
    if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}s", s);
}

nlohmann::json step_json(const StepStats& s) {
    return {{"step", s.step},
            {"loss", s.loss},
            {"grad_norm", s.grad_norm},
            {"clipped", s.clipped},
            {"param_norm", s.param_norm},
            {"lr", s.lr},
            {"tokens_seen", s.tokens_seen},
            {"tokens_per_s", s.tokens_per_second},
            {"mfu", s.mfu},
            {"step_s", s.step_seconds},
            {"data_s", s.data_seconds},
            {"forward_s", s.forward_seconds},
            {"backward_s", s.backward_seconds},
            {"optimizer_s", s.optimizer_seconds},
            {"comm_s", s.comm_seconds},
            {"comm_exposed_s", s.comm_exposed_seconds},
            {"tp_comm_s", s.tp_comm_seconds}};
}

// Everything the run reads tokens from.
struct Data {
    std::unique_ptr<TokenFile> token_file;
    std::optional<Dataset> dataset;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Loader> loader;
    std::vector<std::vector<int32_t>> eval_batches;  // each (B, T+1), held out
    double heldout_unigram_entropy = NAN;             // nats per token
    BatchSource* source = nullptr;
};

// Shannon entropy of the token frequencies: the loss of the best model that
// ignores context. A language model must go well below it.
double unigram_entropy(const std::vector<int32_t>& tokens) {
    std::map<int32_t, long> counts;
    for (int32_t t : tokens) counts[t]++;
    double h = 0.0;
    for (auto& [t, c] : counts) {
        double p = (double)c / tokens.size();
        h -= p * std::log(p);
    }
    return h;
}

// Data-parallel rank `rank` of `world` reads its own stream (the loader splits
// documents by rank; the token file hands out the rank's windows of each
// global batch).
Data open_data(const TrainConfig& config, const std::optional<LoaderState>& loader_state, int rank, int world) {
    Data d;
    const int B = config.run.batch_size, T = config.run.seq_len;
    if (config.data.corpus.empty()) {
        if (config.run.data.empty())
            throw std::runtime_error("no training data: set data.corpus (with data.tokenizer) or run.data, or pass --data");
        d.token_file = std::make_unique<TokenFile>(config.run.data, config.run.data_dtype, config.model.vocab_size,
                                                   (long)B * T + 1, rank, world);
        d.source = d.token_file.get();
        spdlog::info("data: token file {} ({} tokens)", config.run.data, d.token_file->size());
        return d;
    }
    d.dataset = load_dataset(config.data);
    const Dataset& ds = *d.dataset;
    spdlog::info("data: {} documents ({} training, {} held out); skipped {} invalid UTF-8, {} empty; removed {} "
                 "duplicate paragraphs",
                 ds.stats.documents, ds.train->size(), ds.heldout->size(), ds.stats.skipped_invalid_utf8,
                 ds.stats.skipped_empty, ds.stats.duplicate_paragraphs);
    d.tokenizer = std::make_unique<Tokenizer>(config.data.tokenizer);
    if (d.tokenizer->vocab_size() > config.model.vocab_size)
        throw std::runtime_error(fmt::format("tokenizer {} has {} pieces but model.vocab_size is {}",
                                             config.data.tokenizer, d.tokenizer->vocab_size(), config.model.vocab_size));
    d.loader = std::make_unique<Loader>(ds.train, *d.tokenizer, B, T, config.run.seed, rank, world,
                                        config.data.prefetch_batches, loader_state.value_or(LoaderState{}));
    d.source = d.loader.get();

    // The held-out set: its documents in corpus order, packed like training.
    Packer heldout(ds.heldout, *d.tokenizer, 0, 0, 1, false, {});
    std::vector<int32_t> all;
    for (int i = 0; i < config.run.eval_batches; i++) {
        std::vector<int32_t> batch;
        for (int b = 0; b < B; b++)
            if (!heldout.next_sequence(batch, T + 1)) break;
        if ((int)batch.size() < B * (T + 1)) break;
        all.insert(all.end(), batch.begin(), batch.end());
        d.eval_batches.push_back(std::move(batch));
    }
    std::vector<int32_t> heldout_tokens;
    for (const Document& doc : *ds.heldout) d.tokenizer->encode(doc.text, heldout_tokens);
    if (!heldout_tokens.empty()) d.heldout_unigram_entropy = unigram_entropy(heldout_tokens);
    spdlog::info("held out: {} tokens, {} eval batches; unigram entropy {:.3f} nats/token (the loss of a model that "
                 "ignores context)",
                 heldout_tokens.size(), d.eval_batches.size(), d.heldout_unigram_entropy);
    if (config.run.eval_every > 0 && d.eval_batches.empty())
        spdlog::warn("the held-out split is smaller than one batch: no held-out evaluation");
    return d;
}

double heldout_loss(Model& model, const std::vector<std::vector<int32_t>>& batches, int B, int T) {
    std::vector<int32_t> inputs((long)B * T), targets((long)B * T);
    double sum = 0.0;
    for (const auto& batch : batches) {
        for (int b = 0; b < B; b++) {
            const int32_t* seq = batch.data() + (long)b * (T + 1);
            std::copy(seq, seq + T, inputs.begin() + (long)b * T);
            std::copy(seq + 1, seq + T + 1, targets.begin() + (long)b * T);
        }
        sum += model.forward(inputs.data(), targets.data());
    }
    return sum / batches.size();
}

// Refuses a resume whose model, data or parallel layout differ from the
// checkpoint's, unless the user allowed a data change.
void check_resumable(const TrainConfig& config, const CheckpointState& ck, const Data& data, bool allow_data_change,
                     const std::string& dir) {
    if (config.parallel.dp != ck.world_size || config.parallel.tp != ck.tp_size)
        spdlog::info("resuming a checkpoint of dp {} x tp {} at dp {} x tp {}", ck.world_size, ck.tp_size,
                     config.parallel.dp, config.parallel.tp);
    if (ck.config.at("model") != config_to_json(config).at("model"))
        throw std::runtime_error(fmt::format("cannot resume from {}: its model config differs from this run's", dir));
    if (allow_data_change) return;
    std::string corpus = data.dataset ? data.dataset->fingerprint : "";
    std::string tokenizer = data.tokenizer ? data.tokenizer->fingerprint() : "";
    auto refuse = [&](const char* what) {
        throw std::runtime_error(fmt::format(
            "cannot resume from {}: the {} differs from the checkpoint's (pass --allow-data-change to resume anyway)",
            dir, what));
    };
    if (ck.corpus_fingerprint != corpus) refuse("corpus");
    if (ck.tokenizer_fingerprint != tokenizer) refuse("tokenizer");
    // The token file is one global stream at any world size; the loader's
    // per-rank streams are not.
    if (data.loader && ck.world_size != config.parallel.dp) refuse("data-parallel world size");
}

// Where this data-parallel rank's stream resumes: its own saved state, or,
// when the world size changed (allowed by --allow-data-change), the start of
// the epoch after the newest one any rank had reached.
std::optional<LoaderState> resume_loader_state(const CheckpointState& ck, int dp_rank, int dp_size) {
    if ((int)ck.loaders.size() == dp_size) return ck.loaders[dp_rank];
    if (ck.loaders.empty() && dp_size == 1) return ck.loader;
    LoaderState fresh;
    for (const LoaderState& l : ck.loaders) fresh.epoch = std::max(fresh.epoch, l.epoch + 1);
    if (ck.loaders.empty() && ck.loader) fresh.epoch = ck.loader->epoch + 1;
    return fresh;
}

// SIGINT and SIGTERM ask the loop to stop after the current step; the run then
// checkpoints and the store drains before the process exits.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void request_stop(int sig) { g_stop_signal = sig; }

struct StopSignals {
    void (*old_int)(int), (*old_term)(int);
    StopSignals() {
        g_stop_signal = 0;
        old_int = std::signal(SIGINT, request_stop);
        old_term = std::signal(SIGTERM, request_stop);
    }
    ~StopSignals() {
        std::signal(SIGINT, old_int);
        std::signal(SIGTERM, old_term);
    }
};

// One training run in phases: the build (parallel layout, resume decision,
// data, trainer, weights, banner, store and metrics file), the step loop,
// and the ending (final evaluation and checkpoint, the run's status).
class TrainingRun {
  public:
    TrainingRun(const TrainConfig& config, const RunOptions& options);
    int run();  // the process's exit code

  private:
    void decide_resume();
    void build_trainer();
    void log_banner() const;
    void open_metrics_file();
    int loop();  // a stop signal, or 0; halt_reason_ set when a halt ended it
    void after_step(const StepStats& s);
    void log_step(const StepStats& s, int done) const;
    void checkpoint();
    double evaluate();
    void raise(telemetry::Alert alert, detectors::Policy policy);
    void run_probe(int64_t step);
    int finish_halted();
    void finish_training();
    int finish(int stop_signal);

    const TrainConfig& config_;
    const RunOptions& options_;
    const int B_, T_, total_steps_;
    Parallel parallel_;
    std::optional<std::string> resume_dir_;
    std::optional<CheckpointState> resume_state_;
    std::unique_ptr<Data> data_;
    double peak_ = 0.0;
    bool peak_measured_ = false;
    std::unique_ptr<Trainer> trainer_;
    std::unique_ptr<RunTelemetry> store_;
    std::ofstream metrics_;
    detectors::DetectorSuite suite_;
    std::unique_ptr<detectors::Webhook> webhook_;
    std::string halt_reason_;
    int first_ = 0;
    double elapsed_ = 0.0, data_wait_ = 0.0;
};

TrainingRun::TrainingRun(const TrainConfig& config, const RunOptions& options)
    : config_(config),
      options_(options),
      B_(config.run.batch_size),
      T_(config.run.seq_len),
      total_steps_(options.steps > 0 ? options.steps : config.schedule.total_steps),
      parallel_(config.parallel.dp, config.parallel.tp),
      suite_(config.detectors) {
    // Only rank 0 talks: it logs, writes the store and runs the detectors.
    if (!parallel_.is_root()) spdlog::set_level(spdlog::level::warn);
    if (parallel_.distributed()) log_layout(parallel_);
    if (parallel_.distributed() && (!options.save_weights.empty() || !options.init_weights.empty()) &&
        parallel_.tp_size() > 1)
        throw std::runtime_error("--init and --save take whole-model weights: not with --tp > 1 (checkpoints load at "
                                 "any layout)");
    set_thread_count(config.run.threads);
    decide_resume();
    build_trainer();
    log_banner();
    // Only rank 0 writes the store and the metrics file.
    TrainConfig store_config = config;
    if (!parallel_.is_root()) store_config.run.store = "";
    store_ = std::make_unique<RunTelemetry>(store_config, options.resume, trainer_->next_step());
    if (store_->enabled()) spdlog::info("store: {} (run \"{}\")", config.run.store, run_name(config));
    open_metrics_file();
    if (!config.detectors.webhook.empty() && parallel_.is_root())
        webhook_ = std::make_unique<detectors::Webhook>(config.detectors.webhook, run_name(config));
}

void TrainingRun::decide_resume() {
    if (!options_.resume) return;
    std::vector<std::string> skipped;
    resume_dir_ = latest_good_checkpoint(config_.run.out_dir, &skipped);
    for (const std::string& s : skipped) spdlog::warn("skipping checkpoint: {}", s);
    if (resume_dir_)
        resume_state_ = read_checkpoint_state(*resume_dir_);
    else
        spdlog::warn("--resume: no good checkpoint in {}; starting from step 0", config_.run.out_dir);
}

// Data (at the resumed position), the trainer, and its weights: a
// checkpoint's, --init's, or freshly initialised.
void TrainingRun::build_trainer() {
    std::optional<LoaderState> loader_state;
    if (resume_state_) loader_state = resume_loader_state(*resume_state_, parallel_.dp_rank(), parallel_.dp_size());
    data_ = std::make_unique<Data>(open_data(config_, loader_state, parallel_.dp_rank(), parallel_.dp_size()));
    if (resume_state_) check_resumable(config_, *resume_state_, *data_, options_.allow_data_change, *resume_dir_);
    if (resume_state_ && data_->token_file) data_->token_file->seek(resume_state_->tokens_seen, T_);

    peak_ = config_.run.peak_gflops;
    peak_measured_ = peak_ <= 0;
    if (peak_measured_) peak_ = measure_peak_gflops(config_.precision.bf16_compute());
    trainer_ = std::make_unique<Trainer>(config_, *data_->source, peak_, &parallel_);
    if (resume_state_) {
        load_distributed_checkpoint(*resume_dir_, *trainer_);
        trainer_->set_next_step(resume_state_->step, resume_state_->tokens_seen);
        spdlog::info("resumed from {} at step {} ({} tokens seen)", *resume_dir_, resume_state_->step,
                     resume_state_->tokens_seen);
    } else if (!options_.init_weights.empty()) {
        load_weights(trainer_->model(), options_.init_weights);
        spdlog::info("initial weights from {}", options_.init_weights);
    } else {
        init_shard_weights(trainer_->model(), config_.run.seed);
    }
}

void TrainingRun::log_banner() const {
    const TrainConfig& config = config_;
    const ModelConfig& m = config.model;
    const Model& model = trainer_->model();
    const bool bf16_matmuls = config.precision.bf16_compute();
    spdlog::info("threads: {} (OpenMP, shared by oneDNN){}", config.run.threads,
                 parallel_.distributed() ? " per process" : "");
    spdlog::info("precision: {}{}", precision_mode_name(config.precision.mode),
                 bf16_matmuls ? fmt::format(" | bf16 matmuls: {} | softmax {} | grad accumulation {}",
                                            bf16_matmul_engine_name(), config.precision.softmax_bf16 ? "bf16" : "fp32",
                                            config.precision.grad_accum_bf16 ? "bf16" : "fp32")
                              : "");
    spdlog::info("model: {} parameters, d {} | {} layers | {}/{} heads | hidden {} | vocab {}",
                 full_parameter_count(m), m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.hidden_dim, m.vocab_size);
    if (parallel_.distributed())
        spdlog::info("this rank holds {} parameters{}; gradient reduction {} in {}{}; optimizer state {:.1f} MiB per "
                     "rank{}",
                     model.num_parameters(), model.is_shard() ? " (its tensor-parallel shard)" : "",
                     config.parallel.zero1 ? "reduce-scatter + all-gather (ZeRO-1)" : "bucketed all-reduce",
                     config.precision.reduce_bf16 ? "bf16" : "fp32",
                     config.parallel.zero1 ? "" : ", overlapped with backward",
                     trainer_->optimizer().state_bytes() / 1048576.0,
                     config.parallel.zero1 ? fmt::format(" (ZeRO-1: 1/{} of {:.1f} MiB)", parallel_.dp_size(),
                                                         model.num_parameters() * 8.0 / 1048576.0)
                                           : "");
    spdlog::info("batch {} x {} x {} accum{} = {} tokens/step", B_, T_, config.run.grad_accum,
                 parallel_.dp_size() > 1 ? fmt::format(" x {} replicas", parallel_.dp_size()) : "",
                 (long)B_ * T_ * config.run.grad_accum * parallel_.dp_size());
    spdlog::info("activations: {:.1f} MiB{}", model.activation_bytes() / 1048576.0,
                 config.run.activation_checkpointing
                     ? fmt::format(" with attention recomputed ({:.1f} MiB without: saves {:.1f} MiB)",
                                   model.activation_bytes_without_checkpointing() / 1048576.0,
                                   (model.activation_bytes_without_checkpointing() - model.activation_bytes()) /
                                       1048576.0)
                     : "");
    spdlog::info("FLOPs/token: {:.3e} = 6N + 12*L*d*T with N = {} (no input embedding) | peak {:.1f} GFLOP/s ({})",
                 flops_per_token(m, T_), matmul_parameters(m), peak_,
                 peak_measured_ ? (bf16_matmuls ? "measured by bf16 matmul probe" : "measured by sgemm probe")
                                : "from config");
}

void TrainingRun::open_metrics_file() {
    if (options_.metrics_jsonl.empty() || !parallel_.is_root()) return;
    metrics_.open(options_.metrics_jsonl, std::ios::app);
    if (!metrics_) throw std::runtime_error("cannot open " + options_.metrics_jsonl);
    double entropy = data_->heldout_unigram_entropy;
    metrics_ << nlohmann::json{{"event", "start"},
                               {"step", trainer_->next_step()},
                               {"threads", config_.run.threads},
                               {"peak_gflops", peak_},
                               {"peak_measured", peak_measured_},
                               {"flops_per_token", flops_per_token(config_.model, T_)},
                               {"parameters", full_parameter_count(config_.model)},
                               {"heldout_unigram_entropy", std::isfinite(entropy) ? nlohmann::json(entropy)
                                                                                  : nlohmann::json(nullptr)},
                               {"config", config_to_json(config_)}}
                    .dump()
             << "\n";
}

void TrainingRun::checkpoint() {
    CheckpointState st;
    st.step = trainer_->next_step();
    st.tokens_seen = trainer_->tokens_seen();
    st.config = config_to_json(config_);
    st.corpus_fingerprint = data_->dataset ? data_->dataset->fingerprint : "";
    st.tokenizer_fingerprint = data_->tokenizer ? data_->tokenizer->fingerprint() : "";
    st.world_size = parallel_.dp_size();
    st.tp_size = parallel_.tp_size();
    // Every data-parallel rank's stream position; TP ranks of a replica share theirs.
    std::vector<std::string> states =
        parallel_.gather(data_->loader ? data_->loader->state().to_json().dump() : std::string(), Group::World);
    if (data_->loader && parallel_.is_root()) {
        for (size_t r = 0; r < states.size(); r += parallel_.tp_size())
            st.loaders.push_back(LoaderState::from_json(nlohmann::json::parse(states[r])));
        st.loader = st.loaders.front();
    }
    store_->flush();
    std::string tokenizer = data_->tokenizer ? data_->tokenizer->path() : "";
    std::string dir = save_distributed_checkpoint(parallel_, *trainer_, st, config_.run.out_dir, tokenizer,
                                                  config_.run.keep_checkpoints);
    if (!parallel_.is_root()) return;
    store_->checkpoint(st.step - 1, dir);
    spdlog::info("checkpoint {}", dir);
}

double TrainingRun::evaluate() {
    if (data_->eval_batches.empty()) return NAN;
    double loss = heldout_loss(trainer_->model(), data_->eval_batches, B_, T_);  // every rank: TP forward is collective
    spdlog::info("step {:>6} | held-out loss {:.4f} (unigram entropy {:.3f})", trainer_->next_step(), loss,
                 data_->heldout_unigram_entropy);
    store_->heldout_loss(trainer_->next_step() - 1, loss, trainer_->tokens_seen());
    if (metrics_.is_open())
        metrics_ << nlohmann::json{{"event", "eval"}, {"step", trainer_->next_step() - 1}, {"heldout_loss", loss}}.dump()
                 << "\n"
                 << std::flush;
    return loss;
}

// Every alert goes to the log, the store, the metrics file and the webhook;
// one whose policy is halt stops the run after this step.
void TrainingRun::raise(telemetry::Alert alert, detectors::Policy policy) {
    if (!parallel_.is_root()) return;
    alert.wall_time = telemetry::now_seconds();
    bool halt = policy == detectors::Policy::Halt;
    auto level = alert.severity == "critical" ? spdlog::level::err : spdlog::level::warn;
    spdlog::log(level, "ALERT {} at step {}: {}{}", alert.kind, alert.step, alert.message, halt ? " -> halting" : "");
    store_->alert(alert);
    if (metrics_.is_open())
        metrics_ << nlohmann::json{{"event", "alert"}, {"kind", alert.kind}, {"step", alert.step},
                                   {"severity", alert.severity}, {"message", alert.message}}
                        .dump()
                 << "\n";
    if (webhook_) webhook_->post(alert);
    if (halt && halt_reason_.empty())
        halt_reason_ = fmt::format("{} at step {}: {}", alert.kind, alert.step, alert.message);
}

void TrainingRun::run_probe(int64_t step) {
    const detectors::LeakProbeConfig& probe = config_.detectors.leak_probe;
    if (probe.policy == detectors::Policy::Off) return;
    if (auto leak = probe_causality(trainer_->model(), step)) raise(*leak, probe.policy);
}

int TrainingRun::loop() {
    ProcessFaults process_faults(parse_faults(config_.run.inject), parallel_.world_rank(),
                                 ProcessFaults::attempt_from_env());
    first_ = trainer_->next_step();
    if (trainer_->next_step() < total_steps_) run_probe(trainer_->next_step());
    int stop_signal = agree_on_stop(parallel_, g_stop_signal, halt_reason_);  // the probe may have halted on rank 0
    while (trainer_->next_step() < total_steps_ && !stop_signal && halt_reason_.empty()) {
        process_faults.before_step(trainer_->next_step());
        const int norms_every = config_.run.tensor_norms_every;
        bool norms = norms_every > 0 && trainer_->next_step() % norms_every == 0;
        bool hash_grads = config_.parallel.hash_grads && is_check_step(config_.parallel, trainer_->next_step() + 1);
        StepStats s = trainer_->step(norms, hash_grads);
        after_step(s);
        stop_signal = agree_on_stop(parallel_, g_stop_signal, halt_reason_);
        if (!halt_reason_.empty()) break;
        int done = s.step + 1;
        if (config_.run.checkpoint_every > 0 && done % config_.run.checkpoint_every == 0 && done != total_steps_)
            checkpoint();
    }
    return stop_signal;
}

// What follows every step: the store and metrics file, the log line, the
// held-out evaluation, consistency checks, detectors, probe, halt requests.
void TrainingRun::after_step(const StepStats& s) {
    elapsed_ += s.step_seconds;
    data_wait_ += s.data_seconds;
    const int done = s.step + 1;
    store_->step(s);
    if (metrics_.is_open()) metrics_ << step_json(s).dump() << "\n" << std::flush;
    if (done % config_.run.log_every == 0 || done == total_steps_) log_step(s, done);
    double heldout = NAN;
    if (config_.run.eval_every > 0 && done % config_.run.eval_every == 0) heldout = evaluate();
    detectors::StepRecord record;
    record.step = s.step;
    record.loss = s.loss;
    record.grad_norm = s.grad_norm;
    record.param_norm = s.param_norm;
    record.lr = s.lr;
    record.heldout_loss = heldout;
    check_consistency(parallel_, config_.parallel, trainer_->model(), s, *store_, record);
    for (detectors::Fired& f : suite_.observe(record)) raise(std::move(f.alert), f.policy);
    if (done % config_.detectors.leak_probe.every == 0) run_probe(s.step);
    if (parallel_.is_root())
        if (auto who = store_->halt_requested())
            raise({"halt_request", "critical", s.step, fmt::format("halt requested by {}", *who),
                   nlohmann::json{{"requested_by", *who}}.dump(), 0.0},
                  detectors::Policy::Halt);
}

void TrainingRun::log_step(const StepStats& s, int done) const {
    double eta = elapsed_ / (done - first_) * (total_steps_ - done);
    std::string comm;
    if (parallel_.dp_size() > 1)
        comm = fmt::format(" | DP comm {:.1f} ms, {:.0f}% hidden", 1e3 * s.comm_seconds,
                           s.comm_seconds > 0 ? 100.0 * (1.0 - s.comm_exposed_seconds / s.comm_seconds) : 0.0);
    if (parallel_.tp_size() > 1)
        comm += fmt::format(" | TP comm {:.0f}% of the step", 100.0 * s.tp_comm_seconds / s.step_seconds);
    spdlog::info("step {:>6}/{} | loss {:.4f} | grad norm {:.4f}{} | param norm {:.2f} | lr {:.3e} | "
                 "{:.0f} tok/s | MFU {:.1f}%{} | data wait {:.1f}% | ETA {}",
                 done, total_steps_, s.loss, s.grad_norm, s.clipped ? " (clipped)" : "", s.param_norm, s.lr,
                 s.tokens_per_second, 100.0 * s.mfu, comm, 100.0 * s.data_seconds / s.step_seconds,
                 format_duration(eta));
}

int TrainingRun::finish_halted() {
    // Keep the state if it is still finite (a skipped update leaves it so).
    const Model& model = trainer_->model();
    int nonfinite = std::isfinite(l2_norm(model.params(), model.num_parameters())) ? 0 : 1;
    if (parallel_.max(nonfinite, Group::World) == 0) {  // every rank agrees: the checkpoint is collective
        checkpoint();
    } else {
        spdlog::error("no checkpoint at the halt: the weights are not finite; the last good one stays");
    }
    store_->finish("halted", trainer_->next_step() - 1, halt_reason_);
    spdlog::error("halted after step {}: {}", trainer_->next_step(), halt_reason_);
    spdlog::info("{}", store_->summary());
    return kExitHalted;
}

// The final held-out evaluation (unless the last step had one) and checkpoint.
void TrainingRun::finish_training() {
    if (trainer_->next_step() > first_) {
        if (config_.run.eval_every > 0 && trainer_->next_step() % config_.run.eval_every != 0) evaluate();
        spdlog::info("trained steps {}..{}: {:.1f} s, data wait {:.2f}% of step time", first_ + 1,
                     trainer_->next_step(), elapsed_, elapsed_ > 0 ? 100.0 * data_wait_ / elapsed_ : 0.0);
    }
    checkpoint();
}

int TrainingRun::finish(int stop_signal) {
    if (stop_signal) {
        spdlog::warn("stopped by signal {} after step {}", stop_signal, trainer_->next_step());
        store_->finish("stopped", trainer_->next_step() - 1, fmt::format("signal {}", stop_signal));
    } else {
        store_->finish("finished", trainer_->next_step() - 1, "reached its steps");
    }
    spdlog::info("{}", store_->summary());
    if (!options_.save_weights.empty() && parallel_.is_root()) {
        save_weights(trainer_->model(), options_.save_weights);
        spdlog::info("saved weights to {}", options_.save_weights);
    }
    return stop_signal ? 128 + stop_signal : 0;
}

int TrainingRun::run() {
    StopSignals signals;
    int stop_signal = 0;
    try {
        stop_signal = loop();
        if (!halt_reason_.empty()) return finish_halted();
        finish_training();
    } catch (const std::exception& e) {
        store_->finish("crashed", trainer_->next_step() - 1, e.what());
        throw;
    }
    return finish(stop_signal);
}

}  // namespace

int run_training(const TrainConfig& config, const RunOptions& options) {
    return TrainingRun(config, options).run();
}

}  // namespace hlat
