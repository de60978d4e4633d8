#include "trainer/trainer.h"

#include "trainer/flops.h"
#include "trainer/kernels_bf16.h"

#include <fmt/format.h>
#include <omp.h>

#include <chrono>
#include <cmath>

namespace hlat {

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

void set_thread_count(int threads) {
    omp_set_num_threads(threads);  // oneDNN's matmuls run on OpenMP's pool too
}

Trainer::Trainer(const TrainConfig& config, BatchSource& data, double peak_gflops)
    : config_(config), data_(data), peak_gflops_(peak_gflops), faults_(parse_faults(config.run.inject)) {
    model_ = std::make_unique<Model>(config.model, config.run.batch_size, config.run.seq_len,
                                     config.run.activation_checkpointing, config.precision);
    optimizer_ = std::make_unique<AdamW>(config.optimizer, model_->num_parameters(), config.precision,
                                         config.run.seed);
    long n = (long)config.run.batch_size * config.run.seq_len;
    inputs_.resize(n);
    targets_.resize(n);
}

// Norms of every tensor slice (per layer) and of every tensor kind (all layers).
static void append_tensor_norms(std::vector<std::pair<std::string, double>>& out, const Model& model,
                                const float* base, const char* prefix) {
    for (const TensorKind& k : model.tensor_kinds()) {
        out.push_back({fmt::format("{}/kind/{}", prefix, k.name), l2_norm(base + k.offset, k.numel())});
        long slice = k.rows * k.cols;
        for (int l = 0; l < k.layers; l++)
            out.push_back({fmt::format("{}/layers.{}.{}", prefix, l, k.name), l2_norm(base + k.offset + l * slice, slice)});
    }
}

StepStats Trainer::step(bool tensor_norms) {
    const int B = config_.run.batch_size, T = config_.run.seq_len, accum = config_.run.grad_accum;
    StepStats s{};
    s.step = step_;
    auto t_step = Clock::now();
    const PrecisionConfig& precision = config_.precision;
    const long n_params = model_->num_parameters();
    // Pure bf16 keeps bf16 weights: whatever was initialised or loaded is
    // rounded once (a no-op for weights that already are bf16 values).
    if (precision.bf16_state() && !weights_rounded_) {
        bf16_round_inplace(model_->params(), n_params);
        weights_rounded_ = true;
    }
    model_->zero_grad();
    model_->set_mask_lookahead(faults_.mask_leak_from >= 0 && step_ >= faults_.mask_leak_from ? 1 : 0);
    double loss_sum = 0.0;
    // Every token of the step weighs the same: the loss is the mean over all
    // micro-batches, so each backward scales by 1 / (B * T * accum).
    const float loss_scale = 1.0f / ((float)B * T * accum);
    for (int micro = 0; micro < accum; micro++) {
        auto t0 = Clock::now();
        data_.next_batch(inputs_.data(), targets_.data(), B, T);
        s.data_seconds += seconds_since(t0);
        t0 = Clock::now();
        loss_sum += model_->forward(inputs_.data(), targets_.data());
        s.forward_seconds += seconds_since(t0);
        t0 = Clock::now();
        model_->backward(loss_scale);
        // A bf16 accumulation buffer rounds after every micro-batch's sum.
        if (precision.grad_accum_bf16) bf16_round_inplace(model_->grads(), n_params);
        s.backward_seconds += seconds_since(t0);
    }
    auto t0 = Clock::now();
    s.loss = loss_sum / accum;
    if (step_ == faults_.grad_spike_at) {
        float f = (float)faults_.grad_spike_factor;
        float* g = model_->grads();
        for (long i = 0; i < model_->num_parameters(); i++) g[i] *= f;
    }
    if (step_ == faults_.nan_at) model_->grads()[model_->num_parameters() / 2] = NAN;
    if (tensor_norms) append_tensor_norms(s.tensor_norms, *model_, model_->grads(), "grad_norm");
    // Pure bf16 stores bf16 gradients, before and after clipping.
    if (precision.bf16_state()) bf16_round_inplace(model_->grads(), n_params);
    s.grad_norm = clip_grad_norm(model_->grads(), n_params, config_.optimizer.grad_clip, &s.clipped);
    if (precision.bf16_state() && s.clipped) bf16_round_inplace(model_->grads(), n_params);
    s.lr = learning_rate(config_.schedule, step_);
    if (faults_.lr_spike_from >= 0 && step_ >= faults_.lr_spike_from && step_ < faults_.lr_spike_from + faults_.lr_spike_steps)
        s.lr *= faults_.lr_spike_factor;
    // A non-finite loss or gradient never reaches the weights: the update is
    // skipped and the detectors report it.
    s.update_skipped = !std::isfinite(s.loss) || !std::isfinite(s.grad_norm);
    if (!s.update_skipped) optimizer_->step(*model_, s.lr);
    s.param_norm = l2_norm(model_->params(), model_->num_parameters());
    if (tensor_norms) append_tensor_norms(s.tensor_norms, *model_, model_->params(), "param_norm");
    s.optimizer_seconds = seconds_since(t0);
    s.step_seconds = seconds_since(t_step);

    long tokens = (long)B * T * accum;
    tokens_seen_ += tokens;
    s.tokens_seen = tokens_seen_;
    s.tokens_per_second = tokens / s.step_seconds;
    if (peak_gflops_ > 0)
        s.mfu = flops_per_token(config_.model, T) * s.tokens_per_second / (peak_gflops_ * 1e9);
    step_++;
    return s;
}

}  // namespace hlat
