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
// at total_steps, then min_lr; with a ramp (ramp_start >= 0), max_lr after the
// warm-up, then geometrically to peak_lr over ramp_steps from ramp_start,
// held ramp_hold steps (-1: to the end), then a cosine down to min_lr.
double learning_rate(const ScheduleConfig& s, int step);
// The largest learning rate the schedule gives from `step` to its end: what
// the attention_logit detector projects the run's logits to.
double peak_learning_rate_ahead(const ScheduleConfig& s, int step);

// L2 norm of n floats, accumulated in double.
double l2_norm(const float* x, long n);
// Rounds x to bf16 in place and returns the L2 norm of the rounded values,
// in one pass (the pure bf16 modes' gradients before clipping).
double bf16_round_and_l2_norm(float* x, long n);

// What clipping multiplies the gradients by so their global L2 norm is at
// most max_norm (PyTorch's clip_grad_norm_ rule): max_norm / (norm + 1e-6)
// when that is below 1 (and max_norm > 0, norm finite), else 1. AdamW::step
// applies it as it reads each gradient.
double clip_factor(double norm, double max_norm);

// One tensor slice's part of an AdamW step, summed over this shard's elements
// in the update's own pass: what the per-tensor internals are made of
// (docs/internals.md). A slice is one layer of a per-layer kind, or a whole
// global kind; the slices of model.tensor_kinds() are numbered in buffer
// order (update_slices()).
struct UpdateSums {
    double grad_squares = 0.0;        // of the gradient the update read (clipped)
    double weight_squares = 0.0;      // of the weights before the update
    double new_weight_squares = 0.0;  // after it
    double update_squares = 0.0;      // of (after - before), as stored
    double eps_dominated = 0.0;       // coordinates with sqrt(v_hat) < eps and v != 0
    double moments = 0.0;             // coordinates with v != 0
};
// How many slices the tensor table has: max(1, layers) per kind.
long update_slices(const std::vector<TensorKind>& kinds);

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
    // (of the shard's range only). With sums, also each slice's UpdateSums over
    // the shard's range (update_slices(model.tensor_kinds()) of them, written
    // over), in the same pass. Each gradient is read times grad_scale
    // (clipping's factor; in the pure bf16 modes the product rounded to bf16,
    // as a clipped bf16 gradient holds it): the update of the clipped
    // gradients to the bit, without a pass of its own over them.
    // model.grads() is left as it was.
    void step(Model& model, double lr, std::vector<UpdateSums>* sums = nullptr, float grad_scale = 1.0f);
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
    // Elements [lo, hi) of tensor kind k, the ki-th (a range inside the
    // shard; p and g point at the kind's first element): the update, and
    // when sums is not null the sums of the slices the range touches, into
    // sums[0..] from lo's slice on; returns the bf16 modes' lost updates.
    struct StepConstants;  // the step's betas, bias corrections, eps and rate
    long update_range(const StepConstants& c, const TensorKind& k, size_t ki, float* p, const float* g, long lo,
                      long hi, UpdateSums* sums);
    // The same over a tensor whose last `shared` elements of each slice are
    // shared kv rows this rank does not lead (model.h): those are updated but
    // left out of the slice's sums and of the lost updates, which their kv
    // group's first rank gives.
    long update_range_owned(const StepConstants& c, const TensorKind& k, size_t ki, float* p, const float* g,
                            long lo, long hi, long shared, UpdateSums* sums);

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
