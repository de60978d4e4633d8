// AdamW with decoupled weight decay, global-norm gradient clipping and the
// cosine learning-rate schedule with linear warmup.
#pragma once

#include "trainer/config.h"
#include "trainer/model.h"

#include <vector>

namespace hlat {

// Learning rate of optimizer step `step` (0-based): linear warmup to max_lr over
// warmup_steps (step 0 gets max_lr / warmup_steps), then cosine decay to min_lr
// at total_steps, then min_lr.
double learning_rate(const ScheduleConfig& s, int step);

// L2 norm of n floats, accumulated in double.
double l2_norm(const float* x, long n);

// Scales the gradients so their global L2 norm is at most max_norm (PyTorch's
// clip_grad_norm_ rule: factor max_norm / (norm + 1e-6), only when below 1).
// Returns the norm before clipping; sets *clipped when it scaled.
double clip_grad_norm(float* grads, long n, double max_norm, bool* clipped);

class AdamW {
  public:
    // In the pure bf16 modes the parameters and moments are bf16 values: each
    // update is computed in fp32 and written back rounded, to nearest even or,
    // in bf16_sr, stochastically with bits keyed by (seed, step, tensor,
    // element), and by rank too when precision.sr_key_rank is set.
    AdamW(const OptimizerConfig& config, long num_parameters, const PrecisionConfig& precision = {},
          unsigned long long seed = 0, int rank = 0);
    // One update of model.params() from model.grads() at learning rate lr.
    void step(Model& model, double lr);
    long steps_taken() const { return t_; }
    // Moment buffers, same layout as the parameters (for checkpoints).
    std::vector<float>& first_moment() { return m_; }
    std::vector<float>& second_moment() { return v_; }
    void set_steps_taken(long t) { t_ = t; }

  private:
    OptimizerConfig config_;
    PrecisionConfig precision_;
    unsigned long long rounding_seed_;
    std::vector<float> m_, v_;
    long t_ = 0;
};

}  // namespace hlat
