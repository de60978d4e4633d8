#include "trainer/trainer.h"

#include "trainer/model/kernel_profile.h"

#include "trainer/model/flops.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/sgemm.h"
#include "trainer/run/every.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

namespace hlat {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

void set_thread_count(int threads) {
    omp_set_num_threads(threads);  // oneDNN's matmuls run on OpenMP's pool too
}

Trainer::Trainer(const TrainConfig& config, BatchSource& data, double peak_gflops, Parallel* parallel,
                 const Faults& faults)
    : config_(config),
      data_(data),
      peak_gflops_(peak_gflops),
      parallel_(parallel && parallel->distributed() ? parallel : nullptr),
      faults_(faults) {
    model_ = std::make_unique<Model>(config.model, config.run.batch_size, config.run.seq_len,
                                     config.run.activation_checkpointing, config.precision, parallel_,
                                     config.parallel.sp);
    long begin = 0, end = -1;
    int rank = 0;
    if (parallel_) {
        reducer_ = std::make_unique<GradReducer>(*parallel_, *model_, config.parallel.zero1,
                                                 config.precision.reduce_bf16, faults_);
        begin = reducer_->shard_begin();
        end = reducer_->shard_end();
        rank = parallel_->world_rank();
    }
    optimizer_ = std::make_unique<AdamW>(config.optimizer, model_->num_parameters(), config.precision,
                                         config.run.seed, rank, begin, end);
    internals_labels_ = internals_labels(config.model, model_->tensor_kinds());
    long n = (long)config.run.batch_size * config.run.seq_len;
    inputs_.resize(n);
    targets_.resize(n);
}

Trainer::~Trainer() = default;

// Sum of squares of buffer[lo, hi) where tensor k's floats count on this
// rank in a sum over the tensor-parallel group (counted_ranges: replicated
// tensors and shared kv rows once).
static double counted_squares(const float* buffer, const TensorKind& k, const ShardShape& shard, long lo, long hi) {
    double squares = 0.0;
    for (auto [a, b] : counted_ranges(k, shard)) {
        const long from = std::max(lo, a), to = std::min(hi, b);
        if (from >= to) continue;
        const double n = l2_norm(buffer + from, to - from);
        squares += n * n;
    }
    return squares;
}

// Sum of squares of buffer[begin, end) as the whole job sees it: each shard's
// part summed over the tensor-parallel group, replicated floats counted once,
// and with ZeRO-1 each replica's range summed over the data-parallel group.
static double job_sum_squares(Parallel& parallel, const Model& model, const float* buffer, long begin, long end,
                              bool over_data) {
    double local = 0.0;
    for (const TensorKind& k : model.tensor_kinds()) local += counted_squares(buffer, k, model.shard(), begin, end);
    double sum = parallel.sum(local, Group::Tensor);
    return over_data ? parallel.sum(sum, Group::Data) : sum;
}

// Norms of every tensor kind (all layers) and every slice (per layer). In a
// tensor-parallel job each shard's squares are summed over the group, the
// replicated floats' taken once.
static void append_tensor_norms(std::vector<std::pair<std::string, double>>& out, const Model& model,
                                const float* base, const char* prefix, Parallel* parallel) {
    std::vector<std::string> names;
    std::vector<double> squares;
    auto add = [&](std::string name, const TensorKind& k, long lo, long hi) {
        names.push_back(std::move(name));
        squares.push_back(counted_squares(base, k, model.shard(), lo, hi));
    };
    for (const TensorKind& k : model.tensor_kinds()) {
        add(fmt::format("{}/kind/{}", prefix, k.name), k, k.offset, k.offset + k.numel());
        long slice = k.rows * k.cols;
        for (int l = 0; l < k.layers; l++) {
            const long lo = k.offset + l * slice;
            add(fmt::format("{}/layers.{}.{}", prefix, l, k.name), k, lo, lo + slice);
        }
    }
    if (parallel) parallel->allreduce(squares.data(), (long)squares.size(), MPI_DOUBLE, MPI_SUM, Group::Tensor);
    for (size_t i = 0; i < names.size(); i++) out.push_back({names[i], std::sqrt(squares[i])});
}

StepStats Trainer::step(bool tensor_norms, bool hash_grads) {
    StepStats s{};
    measuring_ = every(config_.run.internals_every, step_);
    s.step = step_;
    auto t_step = Clock::now();
    const double stall = inject_fleet_faults(s);
    accumulate(s);
    reduce(s, hash_grads);
    auto t0 = Clock::now();
    clip(s, tensor_norms);
    update(s);
    measure(s, tensor_norms);
    s.optimizer_seconds = seconds_since(t0);
    s.step_seconds = seconds_since(t_step);
    count_tokens(s);
    // Waits for other ranks (the data-parallel reduction's exposed part, the
    // tensor-parallel all-reduces) are not compute: a fast rank waits there.
    s.compute_seconds = std::max(0.0, s.forward_seconds + s.backward_seconds + s.optimizer_seconds -
                                          s.comm_exposed_seconds - s.tp_comm_seconds);
    last_compute_seconds_ = s.compute_seconds - stall;
    step_++;
    return s;
}

// A throttled core: the step's compute takes `slowdown` times as long, so
// this rank sleeps the difference (estimated from its previous step) before
// computing, and reaches each all-reduce late. Counted as forward time.
double Trainer::inject_fleet_faults(StepStats& s) {
    const int rank = parallel_ ? parallel_->world_rank() : 0;
    set_gemm_bit_flip(faults_.corrupts_arithmetic(rank, step_));
    const double slowdown = faults_.slowdown(rank, step_);
    if (slowdown <= 1.0 || last_compute_seconds_ <= 0.0) return 0.0;
    const double stall = (slowdown - 1.0) * last_compute_seconds_;
    std::this_thread::sleep_for(std::chrono::duration<double>(stall));
    s.forward_seconds += stall;
    return stall;
}

void Trainer::accumulate(StepStats& s) {
    const int B = config_.run.batch_size, T = config_.run.seq_len, accum = config_.run.grad_accum;
    const long n_params = model_->num_parameters();
    // Pure bf16 keeps bf16 weights: whatever was initialised or loaded is
    // rounded once (a no-op for weights that already are bf16 values).
    if (config_.precision.bf16_state() && !weights_rounded_) {
        bf16_round_inplace(model_->params(), n_params);
        weights_rounded_ = true;
    }
    model_->zero_grad();
    model_->set_mask_lookahead(faults_.mask_lookahead(step_));
    model_->measure_internals(measuring_);
    double loss_sum = 0.0, z_loss_sum = 0.0;
    // Every token of the step weighs the same: the loss is the mean over all
    // micro-batches, so each backward scales by 1 / (B * T * accum).
    // Sequences left out (replay --without) leave the mean to the others.
    long kept = (long)B * accum;
    for (const std::vector<char>& rows : dropped_) kept -= std::count(rows.begin(), rows.end(), 1);
    const float loss_scale = 1.0f / ((float)std::max(1L, kept) * T);
    for (int micro = 0; micro < accum; micro++) {
        auto t0 = Clock::now();
        data_.next_batch(inputs_.data(), targets_.data(), B, T);
        if (const BatchProvenance* p = data_.last_provenance()) s.provenance.push_back(*p);
        s.data_seconds += seconds_since(t0);
        t0 = Clock::now();
        loss_sum += model_->forward(inputs_.data(), targets_.data());
        const std::vector<float>& losses = model_->sequence_losses();
        s.sequence_losses.insert(s.sequence_losses.end(), losses.begin(), losses.end());
        z_loss_sum += model_->z_loss_term();  // NaN when off
        s.forward_seconds += seconds_since(t0);
        t0 = Clock::now();
        // The last micro-batch's backward starts the data-parallel reduction.
        if (reducer_ && micro == accum - 1) reducer_->arm(step_);
        model_->drop_sequences(micro < (int)dropped_.size() ? dropped_[micro] : std::vector<char>{});
        model_->backward(loss_scale);
        const std::vector<float>& grads = model_->sequence_grad_norms();
        s.sequence_grad_norms.insert(s.sequence_grad_norms.end(), grads.begin(), grads.end());
        // A bf16 accumulation buffer rounds after every micro-batch's sum.
        if (config_.precision.grad_accum_bf16) {
            KernelScope scope("round to bf16", 8.0 * n_params);
            bf16_round_inplace(model_->grads(), n_params);
        }
        s.backward_seconds += seconds_since(t0);
    }
    model_->drop_sequences({});
    dropped_.clear();
    s.loss = loss_sum / accum;
    s.z_loss = z_loss_sum / accum;
}

// The reduction overlaps the backward; what is left of it counts as backward
// time. The replica check hashes the gradients before clipping: a clip factor
// computed from different gradients would make every tensor differ and hide
// the one that was wrong.
void Trainer::reduce(StepStats& s, bool hash_grads) {
    if (!parallel_) return;
    auto t0 = Clock::now();
    CommStats comm = reducer_->finish();
    s.comm_seconds = comm.seconds;
    s.comm_exposed_seconds = comm.exposed_seconds;
    s.backward_seconds += seconds_since(t0);
    s.loss = parallel_->sum(s.loss, Group::Data) / parallel_->dp_size();
    if (!std::isnan(s.z_loss)) s.z_loss = parallel_->sum(s.z_loss, Group::Data) / parallel_->dp_size();
    if (hash_grads && parallel_->dp_size() > 1) s.grad_replicas = check_replicas(*parallel_, *model_, model_->grads());
}

// Injected gradient faults, per-tensor norms, the global norm and clipping.
void Trainer::clip(StepStats& s, bool tensor_norms) {
    const long n_params = model_->num_parameters();
    // ZeRO-1 leaves only this rank's range reduced: the norm over it (and
    // the update, which applies the clip factor, over it alone).
    const bool zero1 = reducer_ && reducer_->zero1();
    const long own_begin = zero1 ? reducer_->shard_begin() : 0, own_end = zero1 ? reducer_->shard_end() : n_params;
    float* g = model_->grads();
    faults_.corrupt_gradients(step_, g, n_params);
    // Per-tensor gradient norms need every tensor reduced: not under ZeRO-1.
    if (tensor_norms && !zero1) append_tensor_norms(s.tensor_norms, *model_, g, "grad_norm", parallel_);
    // Pure bf16 stores bf16 gradients: rounded in the norm's pass (the
    // update rounds each clipped one as it reads it).
    const bool bf16 = config_.precision.bf16_state();
    {
        KernelScope scope("grad norm", (bf16 ? 8.0 : 4.0) * n_params);
        if (!parallel_) {
            s.grad_norm = bf16 ? bf16_round_and_l2_norm(g, n_params) : l2_norm(g, n_params);
        } else {
            if (bf16) bf16_round_inplace(g, n_params);
            s.grad_norm = std::sqrt(job_sum_squares(*parallel_, *model_, g, own_begin, own_end, zero1));
        }
    }
    // The update scales each gradient by this factor (in float) as it reads
    // it: clipping is not a pass of its own, and the gradients stay unclipped.
    const double factor = clip_factor(s.grad_norm, config_.optimizer.grad_clip);
    s.record("clip_scale", factor);  // what clipping leaves of the gradient: 1, untouched
    s.clipped = factor < 1.0;
    clip_factor_ = s.clipped ? (float)factor : 1.0;
}

// What AdamW reads and writes per step, for the profile: the weights (fp32
// containers) read and written, the gradients read, every state buffer read
// and written.
double Trainer::optimizer_bytes() {
    double bytes = 12.0 * model_->num_parameters();
    for (const auto& [name, buffer] : optimizer_->state()) bytes += 2.0 * buffer->bytes();
    return bytes;
}

void Trainer::update(StepStats& s) {
    s.lr = learning_rate(config_.schedule, step_) * faults_.lr_factor(step_);
    // The largest rate the schedule gives from this step on (faults aside): the
    // attention_logit detector's projection.
    s.record("lr_max_ahead", peak_learning_rate_ahead(config_.schedule, step_));
    // A non-finite loss or gradient never reaches the weights: the update is
    // skipped and the detectors report it.
    s.update_skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
    s.record("update_skipped", s.update_skipped ? 1.0 : 0.0, StepMetric::Kind::Flag, StepMetric::When::NonZero);
    update_sums_.clear();
    if (!s.update_skipped) {
        KernelScope scope("adamw", KernelProfile::active() ? optimizer_bytes() : 0.0);
        optimizer_->step(*model_, s.lr, measuring_ ? &update_sums_ : nullptr, (float)clip_factor_);
    }
    if (reducer_ && reducer_->zero1()) {
        auto t0 = Clock::now();
        reducer_->gather_params();
        double gather = seconds_since(t0);
        s.comm_seconds += gather;
        s.comm_exposed_seconds += gather;
    }
}

// The share of weights whose non-zero update rounded away, over the whole job:
// each rank counts its own elements (its TP shard, its ZeRO-1 range), what
// several TP ranks hold once (counted_ranges; the optimizer counts shared kv
// rows' lost updates on their group's first rank only).
void Trainer::count_lost_updates(StepStats& s) {
    s.lost_updates = NAN;
    const std::vector<long>& lost = optimizer_->lost_updates();
    if (lost.empty() || s.update_skipped) return;
    const auto& kinds = model_->tensor_kinds();
    const size_t n = kinds.size();
    std::vector<double> counts(2 * n, 0.0);  // lost per kind, then elements per kind
    for (size_t k = 0; k < n; k++) {
        long elements = 0;
        for (auto [a, b] : counted_ranges(kinds[k], model_->shard())) elements += b - a;
        if (elements == 0) continue;  // a replicated tensor, counted on TP rank 0
        counts[k] = (double)lost[k];
        counts[n + k] = (double)elements;
    }
    if (parallel_) {
        parallel_->allreduce(counts.data(), (long)counts.size(), MPI_DOUBLE, MPI_SUM, Group::Tensor);
        if (reducer_ && reducer_->zero1()) parallel_->allreduce(counts.data(), (long)n, MPI_DOUBLE, MPI_SUM, Group::Data);
    }
    double lost_total = 0.0, elements = 0.0;
    std::vector<float> shares(n);
    for (size_t k = 0; k < n; k++) {
        lost_total += counts[k];
        elements += counts[n + k];
        const double share = counts[k] / counts[n + k];
        shares[k] = (float)share;
        s.lost_updates_by_kind.push_back({"lost_updates/kind/" + kinds[k].name, share});  // stored as before: a double
    }
    s.lost_updates = lost_total / elements;
    // What the precision-stall detector reads: only where rounding throws the
    // update away. bf16_sr keeps it in expectation, bf16_kahan in its
    // compensation buffer (docs/precision.md), so their counts are of updates
    // deferred, not lost.
    if (config_.precision.mode == PrecisionMode::Bf16)
        s.internals.push_back({"lost_update_share", 0, std::move(shares), 0.0, internals_labels_.kinds});
}

// Parameter norms after the update.
void Trainer::measure(StepStats& s, bool tensor_norms) {
    count_lost_updates(s);
    const long n_params = model_->num_parameters();
    {
        KernelScope scope("param norm", 4.0 * n_params);
        s.param_norm = parallel_
                           ? std::sqrt(job_sum_squares(*parallel_, *model_, model_->params(), 0, n_params, false))
                           : l2_norm(model_->params(), n_params);
    }
    if (tensor_norms) append_tensor_norms(s.tensor_norms, *model_, model_->params(), "param_norm", parallel_);
    collect_internals(s);
}

// Forward's sums (every micro-batch's) and the optimizer's, reduced over the
// job. Measuring stops here, so evaluations between steps add nothing.
void Trainer::collect_internals(StepStats& s) {
    if (!measuring_) return;
    add_forward_internals(s, model_->internals(), parallel_, internals_labels_);
    add_tensor_internals(s, update_sums_, model_->tensor_kinds(), clip_factor_, parallel_,
                         reducer_ && reducer_->zero1(), internals_labels_);
    model_->measure_internals(false);
}

// Every data-parallel replica trains on its own tokens; TP ranks share theirs.
void Trainer::count_tokens(StepStats& s) {
    const double bus_bytes = parallel_ ? parallel_->take_tensor_comm_bus_bytes() : 0.0;
    if (parallel_) s.tp_comm_seconds = parallel_->take_tensor_comm_seconds();
    s.record("tp_comm_busbw_gbs", s.tp_comm_seconds > 0 ? bus_bytes / s.tp_comm_seconds / 1e9 : 0.0,
             StepMetric::Kind::Real, StepMetric::When::NonZero);
    // The share of the step spent waiting for data.
    s.record("data_wait_share", s.step_seconds > 0 ? s.data_seconds / s.step_seconds : 0.0);
    const int replicas = parallel_ ? parallel_->dp_size() : 1, processes = parallel_ ? parallel_->world_size() : 1;
    const int T = config_.run.seq_len;
    long tokens = (long)config_.run.batch_size * T * config_.run.grad_accum * replicas;
    tokens_seen_ += tokens;
    s.tokens_seen = tokens_seen_;
    s.tokens_per_second = tokens / s.step_seconds;
    if (peak_gflops_ > 0)
        s.mfu = flops_per_token(config_.model, T) * s.tokens_per_second / (peak_gflops_ * processes * 1e9);
}

}  // namespace hlat
