// AdamW with decoupled weight decay, global-norm gradient clipping and the
// cosine learning-rate schedule with linear warmup.
#pragma once

#include "trainer/config/model_config.h"
#include "trainer/config/optimizer_config.h"
#include "trainer/model/model.h"
#include "trainer/model/state_buffer.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat {

// Learning rate of optimizer step `step` (0-based): linear warmup to max_lr over
// warmup_steps (step 0 gets max_lr / warmup_steps), then cosine decay to min_lr
// at total_steps, then min_lr.
double learning_rate(const ScheduleConfig& s, int step);

// L2 norm of n floats, accumulated in double.
double l2_norm(const float* x, long n);
// Rounds x to bf16 in place and returns the L2 norm of the rounded values,
// in one pass (the pure bf16 modes' gradients before clipping).
double bf16_round_and_l2_norm(float* x, long n);

// Scales the gradients so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_ rule: factor max_norm / (norm + 1e-6), only when below 1).
// Returns the norm before clipping; sets *clipped when it scaled.
double clip_grad_norm(float* grads, long n, double max_norm, bool* clipped);
// The scaling step of clip_grad_norm, for a norm computed elsewhere (over
// shards); returns whether it scaled.
// With round_bf16 the scaled values are rounded to bf16 in the same pass.
bool clip_to_norm(float* grads, long n, double norm, double max_norm, bool round_bf16 = false);

class AdamW {
  public:
    // In the pure bf16 modes the parameters and moments are bf16 values: each
    // update is computed in fp32 and written back rounded, to nearest even or,
    // in bf16_sr, stochastically with bits keyed by (seed, step, tensor,
    // element), and by rank too when precision.sr_key_rank is set; bf16_kahan
    // rounds to nearest and keeps what the rounding lost in a bf16
    // compensation buffer, added to the element's next update.
    // ZeRO-1: with a shard [shard_begin, shard_end) of the flat buffer, only
    // that range is updated and only its moments are kept (end -1: to the end).
    AdamW(const OptimizerConfig& config, long num_parameters, const PrecisionConfig& precision = {},
          unsigned long long seed = 0, int rank = 0, long shard_begin = 0, long shard_end = -1);
    // One update of model.params() from model.grads() at learning rate lr
    // (of the shard's range only).
    void step(Model& model, double lr);
    long steps_taken() const { return t_; }
    long shard_begin() const { return begin_; }
    long shard_end() const { return end_; }
    // Bytes allocated for the moments (and bf16_kahan's compensation): 4 an
    // element in fp32 and mixed, 2 in the pure bf16 modes.
    long state_bytes() const { return m_.bytes() + v_.bytes() + (c_ ? c_->bytes() : 0); }
    // The state buffers of the shard's range (all parameters without ZeRO) by
    // their checkpoint names: exp_avg, exp_avg_sq, and in bf16_kahan
    // kahan_compensation.
    std::vector<std::pair<std::string, StateBuffer*>> state();
    StateBuffer& first_moment() { return m_; }
    StateBuffer& second_moment() { return v_; }
    void set_steps_taken(long t) { t_ = t; }
    const PrecisionConfig& precision() const { return precision_; }
    // In the bf16 modes, after each step: per tensor kind (model.tensor_kinds()
    // order), how many elements of this shard had a non-zero update but kept
    // their stored value, the update lost in rounding. Empty in fp32 and mixed.
    const std::vector<long>& lost_updates() const { return lost_; }

  private:
    OptimizerConfig config_;
    PrecisionConfig precision_;
    unsigned long long rounding_seed_;
    long begin_, end_;
    StateBuffer m_, v_;
    std::optional<StateBuffer> c_;  // bf16_kahan's compensation
    std::vector<long> lost_;
    long t_ = 0;
};

}  // namespace hlat
