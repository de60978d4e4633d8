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
    const double factor = clip_factor(norm, max_norm);
    if (factor >= 1.0) return false;
    if (round_bf16)
double clip_factor(double norm, double max_norm) {
    if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0;
    return std::min(1.0, max_norm / (norm + 1e-6));
}

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
// One coordinate into the sums: its gradient, its weight before and after,
// and whether Adam's denominator is mostly epsilon there.
static inline void add_coordinate(double& grad, double& weight, double& new_weight, double& update, double& eps_count,
                                  double& moments, float g, float w, float stored, float v, float v_hat, float eps) {
    const float u = stored - w;
    grad += (double)g * g;
    weight += (double)w * w;
    new_weight += (double)stored * stored;
    update += (double)u * u;
    // A coordinate whose v is exactly 0 never had a gradient (a token never
    // seen): it is left out, or it would pin the share at a floor.
    eps_count += v != 0.0f && std::sqrt(v_hat) < eps;
    moments += v != 0.0f;
}

struct AdamW::StepConstants {
    float b1, b2, bc1, bc2, eps, lr;
    bool sr_params, sr_moments;
};

// One range's AdamW update in fp32; m and v are indexed like p (element i at
// m[i]). With kMeasure, the range's sums from the same pass.
template <bool kMeasure>
static UpdateSums fp32_update(float* p, const float* g, float* m, float* v, long lo, long hi, float b1, float b2,
                              float bc1, float bc2, float eps, float lr, float wd) {
    double gs = 0.0, ws = 0.0, nws = 0.0, us = 0.0, es = 0.0, ms = 0.0;
#pragma omp parallel for reduction(+ : gs, ws, nws, us, es, ms)
    for (long i = lo; i < hi; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float m_hat = m[i] / bc1;
        float v_hat = v[i] / bc2;
        const float w = p[i];
        p[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p[i]);
        if constexpr (kMeasure) add_coordinate(gs, ws, nws, us, es, ms, g[i], w, p[i], v[i], v_hat, eps);
    }
    return {gs, ws, nws, us, es, ms};
}

    const float* g;  // gradients
    bf16 *m, *v;     // moments, element i at m[i - lo]
    bf16* c;         // Kahan compensation like the moments, or null
    long lo, hi;
    float b1, b2, bc1, bc2, eps, lr, wd;
    uint64_t key_p, key_m, key_v;  // rounding bits (stochastic rounding)
};

template <bool kSrParams, bool kSrMoments, bool kKahan, bool kMeasure>
static long bf16_update(const Bf16Update& u, UpdateSums* out) {
    long lost = 0;
    float* p = u.p;
    bf16 *m = u.m - u.lo, *v = u.v - u.lo, *c = kKahan ? u.c - u.lo : nullptr;
    const float* g = u.g;
#pragma omp parallel for simd reduction(+ : lost, gs, ws, nws, us, es, ms)
    for (long i = u.lo; i < u.hi; i++) {
    double gs = 0.0, ws = 0.0, nws = 0.0, us = 0.0, es = 0.0, ms = 0.0;
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

        if constexpr (kMeasure)
            add_coordinate(gs, ws, nws, us, es, ms, g[i], p[i], stored, bf16_to_float(v[i]), v_hat, u.eps);
template <bool kMeasure>
static long bf16_update_variant(const Bf16Update& u, bool kahan, bool sr_moments, bool sr_params, UpdateSums* out) {
    return kahan        ? bf16_update<false, false, true, kMeasure>(u, out)
           : sr_moments ? bf16_update<true, true, false, kMeasure>(u, out)
           : sr_params  ? bf16_update<true, false, false, kMeasure>(u, out)
                        : bf16_update<false, false, false, kMeasure>(u, out);
}

long update_slices(const std::vector<TensorKind>& kinds) {
    long n = 0;
    for (const TensorKind& k : kinds) n += k.layers ? k.layers : 1;
    return n;
}

long AdamW::update_range(const StepConstants& c, const TensorKind& k, size_t ki, float* p, const float* g, long lo,
                         long hi, UpdateSums* sums) {
    bool decay = config_.decay_norms_and_embeddings || !k.norm_or_embedding;
    const float wd = decay ? (float)config_.weight_decay : 0.0f;
    // Moments are kept for the shard only: element i of the tensor is at
    // k.offset + i - begin_ there.
    const long at = k.offset - begin_;
    if (!precision_.bf16_state()) {
        float *m = m_.f32() + at, *v = v_.f32() + at;
        if (sums)
            *sums = fp32_update<true>(p, g, m, v, lo, hi, c.b1, c.b2, c.bc1, c.bc2, c.eps, c.lr, wd);
        else
            fp32_update<false>(p, g, m, v, lo, hi, c.b1, c.b2, c.bc1, c.bc2, c.eps, c.lr, wd);
        return 0;
    }
    // The same update computed in fp32 from bf16 values and written back
    // as bf16. Three streams of rounding bits per tensor (weights, first
    // and second moment); elements are numbered within the tensor, so the
    // bits do not depend on how the flat buffer is laid out or split.
    Bf16Update u{p, g, m_.b16() + at + lo, v_.b16() + at + lo, c_ ? c_->b16() + at + lo : nullptr, lo, hi,
                 c.b1, c.b2, c.bc1, c.bc2, c.eps, c.lr, wd, rounding_key(rounding_seed_, t_, 3 * ki),
                 rounding_key(rounding_seed_, t_, 3 * ki + 1), rounding_key(rounding_seed_, t_, 3 * ki + 2)};
    return sums ? bf16_update_variant<true>(u, c_.has_value(), c.sr_moments, c.sr_params, sums)
                : bf16_update_variant<false>(u, c_.has_value(), c.sr_moments, c.sr_params, nullptr);
}

void AdamW::step(Model& model, double lr, std::vector<UpdateSums>* sums) {
    t_++;
    if constexpr (kMeasure) *out = {gs, ws, nws, us, es, ms};
    const bool sr_params = precision_.mode == PrecisionMode::Bf16Sr;
    const StepConstants c{(float)config_.beta1, (float)config_.beta2,
                          (float)(1.0 - std::pow(config_.beta1, (double)t_)),
                          (float)(1.0 - std::pow(config_.beta2, (double)t_)), (float)config_.eps, (float)lr,
                          sr_params, sr_params && precision_.sr_moments};
    float* params = model.params();
    const float* grads = model.grads();
    const auto& kinds = model.tensor_kinds();
    if (precision_.bf16_state()) lost_.assign(kinds.size(), 0);
    if (sums) sums->assign(update_slices(kinds), UpdateSums{});
    long slice0 = 0;  // the kind's first slice
    for (size_t ki = 0; ki < kinds.size(); ki++) {
        const TensorKind& k = kinds[ki];
        const long slices = k.layers ? k.layers : 1, per = k.numel() / slices;
        // The part of this tensor inside the shard: elements [lo, hi).
        const long lo = std::max(0L, begin_ - k.offset), hi = std::min(k.numel(), end_ - k.offset);
        float* p = params + k.offset;
        const float* g = grads + k.offset;
        long lost = 0;
        if (lo < hi && !sums) lost = update_range(c, k, ki, p, g, lo, hi, nullptr);
        // Measured, slice by slice: each one's sums come from its own pass.
        for (long s = lo / per; sums && lo < hi && s * per < hi; s++)
            lost += update_range(c, k, ki, p, g, std::max(lo, s * per), std::min(hi, (s + 1) * per),
                                 &(*sums)[slice0 + s]);
        if (precision_.bf16_state()) lost_[ki] = lost;
        slice0 += slices;
    }
}

}  // namespace hlat
