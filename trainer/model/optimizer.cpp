#include "trainer/model/optimizer.h"

#include "trainer/model/bf16.h"

#include <algorithm>
#include <cmath>

namespace hlat {

double learning_rate(const ScheduleConfig& s, int step) {
    if (step < s.warmup_steps) return s.max_lr * (step + 1) / s.warmup_steps;
    if (step >= s.total_steps) return s.min_lr;
    int decay_steps = s.total_steps - s.warmup_steps;
    double progress = decay_steps > 0 ? (double)(step - s.warmup_steps) / decay_steps : 1.0;
    return s.min_lr + 0.5 * (s.max_lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
}

// Fixed chunks summed in a fixed order: the norm (and so clipping) is
// bit-identical run to run, whatever the thread count and scheduling, which
// exact resume depends on. An OpenMP reduction combines partial sums in the
// order threads finish. With kRound each element is first rounded to bf16 in
// place, in the same pass.
template <bool kRound>
static double chunked_l2_norm(float* x, long n) {
    constexpr int kChunks = 64;
    double partial[kChunks];
#pragma omp parallel for
    for (int c = 0; c < kChunks; c++) {
        long begin = n * c / kChunks, end = n * (c + 1) / kChunks;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (long i = begin; i < end; i++) {
            if constexpr (kRound) x[i] = bf16_to_float(float_to_bf16_rne(x[i]));
            s += (double)x[i] * x[i];
        }
        partial[c] = s;
    }
    double sum = 0.0;
    for (double p : partial) sum += p;
    return std::sqrt(sum);
}

// Reads only: chunked_l2_norm<false> never writes x.
double l2_norm(const float* x, long n) { return chunked_l2_norm<false>(const_cast<float*>(x), n); }
double bf16_round_and_l2_norm(float* x, long n) { return chunked_l2_norm<true>(x, n); }

double clip_grad_norm(float* grads, long n, double max_norm, bool* clipped) {
    double norm = l2_norm(grads, n);
    *clipped = clip_to_norm(grads, n, norm, max_norm);
    return norm;
}

template <bool kRound>
static void scale(float* x, long n, float f) {
#pragma omp parallel for simd
    for (long i = 0; i < n; i++) x[i] = kRound ? bf16_to_float(float_to_bf16_rne(x[i] * f)) : x[i] * f;
}

bool clip_to_norm(float* grads, long n, double norm, double max_norm, bool round_bf16) {
    if (max_norm <= 0.0 || !std::isfinite(norm)) return false;
    double factor = max_norm / (norm + 1e-6);
    if (factor >= 1.0) return false;
    if (round_bf16)
        scale<true>(grads, n, (float)factor);
    else
        scale<false>(grads, n, (float)factor);
    return true;
}

AdamW::AdamW(const OptimizerConfig& config, long num_parameters, const PrecisionConfig& precision,
             unsigned long long seed, int rank, long shard_begin, long shard_end)
    : config_(config),
      precision_(precision),
      rounding_seed_(precision.sr_key_rank ? seed ^ mix64(0x5eed0000ull + (uint64_t)rank) : seed),
      begin_(shard_begin),
      end_(shard_end < 0 ? num_parameters : shard_end),
      m_(end_ - begin_, precision.bf16_state()),
      v_(end_ - begin_, precision.bf16_state()) {
    if (precision.mode == PrecisionMode::Bf16Kahan) c_.emplace(end_ - begin_, true);
}

std::vector<std::pair<std::string, StateBuffer*>> AdamW::state() {
    std::vector<std::pair<std::string, StateBuffer*>> out = {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
    if (c_) out.push_back({"kahan_compensation", &*c_});
    return out;
}

// Narrows x to bf16, stochastically when `stochastic` is set.
static inline bf16 to_bf16(float x, bool stochastic, uint32_t random) {
    return stochastic ? float_to_bf16_stochastic(x, random) : float_to_bf16_rne(x);
}

// One tensor's (shard range's) AdamW update in the pure bf16 modes. The
// rounding choices are template parameters so each variant's loop has no
// branch and vectorizes.
struct Bf16Update {
    float* p;        // weights, element i at p[i]
    const float* g;  // gradients
    bf16 *m, *v;     // moments, element i at m[i - lo]
    bf16* c;         // Kahan compensation like the moments, or null
    long lo, hi;
    float b1, b2, bc1, bc2, eps, lr, wd;
    uint64_t key_p, key_m, key_v;  // rounding bits (stochastic rounding)
};

template <bool kSrParams, bool kSrMoments, bool kKahan>
static long bf16_update(const Bf16Update& u) {
    long lost = 0;
    float* p = u.p;
    bf16 *m = u.m - u.lo, *v = u.v - u.lo, *c = kKahan ? u.c - u.lo : nullptr;
    const float* g = u.g;
#pragma omp parallel for simd reduction(+ : lost)
    for (long i = u.lo; i < u.hi; i++) {
        float mi = u.b1 * bf16_to_float(m[i]) + (1.0f - u.b1) * g[i];
        float vi = u.b2 * bf16_to_float(v[i]) + (1.0f - u.b2) * g[i] * g[i];
        m[i] = to_bf16(mi, kSrMoments, kSrMoments ? rounding_bits_at(u.key_m, i) : 0);
        v[i] = to_bf16(vi, kSrMoments, kSrMoments ? rounding_bits_at(u.key_v, i) : 0);
        float m_hat = bf16_to_float(m[i]) / u.bc1, v_hat = bf16_to_float(v[i]) / u.bc2;
        float update = -u.lr * (m_hat / (std::sqrt(v_hat) + u.eps) + u.wd * p[i]);
        float stored;
        if constexpr (kKahan) {  // the update plus what earlier roundings lost
            float y = update - bf16_to_float(c[i]);
            stored = bf16_to_float(to_bf16(p[i] + y, false, 0));
            c[i] = to_bf16((stored - p[i]) - y, false, 0);
        } else {
            stored = bf16_to_float(to_bf16(p[i] + update, kSrParams, kSrParams ? rounding_bits_at(u.key_p, i) : 0));
        }
        lost += update != 0.0f && stored == p[i];
        p[i] = stored;
    }
    return lost;
}

void AdamW::step(Model& model, double lr) {
    t_++;
    const float b1 = (float)config_.beta1, b2 = (float)config_.beta2, eps = (float)config_.eps;
    const float bc1 = (float)(1.0 - std::pow(config_.beta1, (double)t_));
    const float bc2 = (float)(1.0 - std::pow(config_.beta2, (double)t_));
    const float lr_f = (float)lr;
    const bool bf16_state = precision_.bf16_state();
    const bool sr_params = precision_.mode == PrecisionMode::Bf16Sr;
    const bool sr_moments = sr_params && precision_.sr_moments;
    float* params = model.params();
    const float* grads = model.grads();
    const auto& kinds = model.tensor_kinds();
    if (bf16_state) lost_.assign(kinds.size(), 0);
    for (size_t ki = 0; ki < kinds.size(); ki++) {
        const TensorKind& k = kinds[ki];
        bool decay = config_.decay_norms_and_embeddings || !k.norm_or_embedding;
        const float wd = decay ? (float)config_.weight_decay : 0.0f;
        // The part of this tensor inside the shard: elements [lo, hi).
        const long lo = std::max(0L, begin_ - k.offset), hi = std::min(k.numel(), end_ - k.offset);
        if (lo >= hi) continue;
        float* p = params + k.offset;
        const float* g = grads + k.offset;
        // Moments are kept for the shard only: element i of the tensor is
        // m[i - lo] here.
        const long at = k.offset + lo - begin_;
        if (!bf16_state) {
            float *m = m_.f32() + at, *v = v_.f32() + at;
#pragma omp parallel for
            for (long i = lo; i < hi; i++) {
                m[i - lo] = b1 * m[i - lo] + (1.0f - b1) * g[i];
                v[i - lo] = b2 * v[i - lo] + (1.0f - b2) * g[i] * g[i];
                float m_hat = m[i - lo] / bc1;
                float v_hat = v[i - lo] / bc2;
                p[i] -= lr_f * (m_hat / (std::sqrt(v_hat) + eps) + wd * p[i]);
            }
            continue;
        }
        // The same update computed in fp32 from bf16 values and written back
        // as bf16. Three streams of rounding bits per tensor (weights, first
        // and second moment); elements are numbered within the tensor, so the
        // bits do not depend on how the flat buffer is laid out or split.
        Bf16Update u{p, g, m_.b16() + at, v_.b16() + at, c_ ? c_->b16() + at : nullptr, lo, hi, b1, b2, bc1,
                     bc2, eps, lr_f, wd, rounding_key(rounding_seed_, t_, 3 * ki),
                     rounding_key(rounding_seed_, t_, 3 * ki + 1), rounding_key(rounding_seed_, t_, 3 * ki + 2)};
        long lost = c_            ? bf16_update<false, false, true>(u)
                    : sr_moments ? bf16_update<true, true, false>(u)
                    : sr_params  ? bf16_update<true, false, false>(u)
                                 : bf16_update<false, false, false>(u);
        lost_[ki] = lost;
    }
}

}  // namespace hlat
