#include "trainer/model/optimizer.h"

#include "trainer/model/bf16.h"
#include "trainer/model/cache_hints.h"

#include <algorithm>
#include <cmath>

namespace hlat {

double learning_rate(const ScheduleConfig& s, int step) {
    if (step < s.warmup_steps) return s.max_lr * (step + 1) / s.warmup_steps;
    if (s.ramp_start >= 0) {
        if (step < s.ramp_start) return s.max_lr;
        const double progress = std::min(1.0, (double)(step - s.ramp_start) / std::max(1, s.ramp_steps));
        const int decay_start = s.ramp_start + s.ramp_steps + s.ramp_hold;
        if (s.ramp_hold < 0 || step < decay_start) return s.max_lr * std::pow(s.peak_lr / s.max_lr, progress);
        if (step >= s.total_steps) return s.min_lr;
        const double down = (double)(step - decay_start) / std::max(1, s.total_steps - decay_start);
        return s.min_lr + 0.5 * (s.peak_lr - s.min_lr) * (1.0 + std::cos(M_PI * down));
    }
    if (step >= s.total_steps) return s.min_lr;
    int decay_steps = s.total_steps - s.warmup_steps;
    double progress = decay_steps > 0 ? (double)(step - s.warmup_steps) / decay_steps : 1.0;
    return s.min_lr + 0.5 * (s.max_lr - s.min_lr) * (1.0 + std::cos(M_PI * progress));
}

// The schedule is monotone between its breakpoints (the warm-up's end, the
// ramp's start and end, the decay's start, total_steps), so its largest value
// from `step` on is at `step` or on either side of a breakpoint ahead.
double peak_learning_rate_ahead(const ScheduleConfig& s, int step) {
    const int decay_start = s.ramp_start + s.ramp_steps + std::max(0, s.ramp_hold);
    double peak = learning_rate(s, step);
    for (int b : {s.warmup_steps, s.ramp_start, s.ramp_start + s.ramp_steps, decay_start, s.total_steps})
        for (int at : {b - 1, b})
            if (at > step) peak = std::max(peak, learning_rate(s, at));
    return peak;
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

double clip_factor(double norm, double max_norm) {
    if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0;
    return std::min(1.0, max_norm / (norm + 1e-6));
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

// The measured loops sum in float over blocks of kSumBlock coordinates (a
// simd reduction the compiler vectorizes) and add each block's sums in
// double: summing every coordinate in double kept the loop scalar, 4x the
// unmeasured update's time. A block's float sums are good to ~1e-6 relative,
// and its counts exact (integers below 2^24).
constexpr long kSumBlock = 1024;

// One coordinate into a block's sums: its gradient, its weight before and
// after, and whether Adam's denominator is mostly epsilon there.
static inline void add_coordinate(float& grad, float& weight, float& new_weight, float& update, float& eps_count,
                                  float& moments, float g, float w, float stored, float v, float v_hat, float eps) {
    const float u = stored - w;
    grad += g * g;
    weight += w * w;
    new_weight += stored * stored;
    update += u * u;
    // A coordinate whose v is exactly 0 never had a gradient (a token never
    // seen): it is left out, or it would pin the share at a floor.
    // (A product, not &&: a branch kept the loop scalar.)
    const float seen = (float)(v != 0.0f);
    eps_count += seen * (float)(std::sqrt(v_hat) < eps);
    moments += seen;
}

// What a measured update needs of one coordinate: its gradient, its weight
// before and after, its second moment (as stored) and v_hat, and whether its
// update was lost in rounding.
struct MeasuredCoordinate {
    float g, w, stored, v, v_hat;
    bool lost;
};

static inline void add_block(UpdateSums& t, float g2, float w2, float n2, float u2, float e, float mo) {
    t.grad_squares += g2, t.weight_squares += w2, t.new_weight_squares += n2;
    t.update_squares += u2, t.eps_dominated += e, t.moments += mo;
}
static inline void add_sums(UpdateSums& t, const UpdateSums& x) {
    t.grad_squares += x.grad_squares, t.weight_squares += x.weight_squares;
    t.new_weight_squares += x.new_weight_squares, t.update_squares += x.update_squares;
    t.eps_dominated += x.eps_dominated, t.moments += x.moments;
}

// The update of elements [lo, hi) of one tensor: coordinate(k, i) updates
// element i from the update's pointers and constants k and returns its
// MeasuredCoordinate. Each thread works on its own copy of k: read through a
// shared one, the constants were reloaded after every store (the weights'
// stores might alias them) and the loops ran scalar. Returns how many
// updates were lost in rounding.
//
// The update runs in blocks of kSumBlock coordinates, and
// coordinate.before_block(k, b1, hi) before each block [b0, b1).
template <class Update, class Coordinate>
static long unmeasured_update(long lo, long hi, const Update& shared, const Coordinate& coordinate) {
    long lost = 0;
#pragma omp parallel reduction(+ : lost)
    {
        const Update k = shared;
#pragma omp for schedule(static)
        for (long b0 = lo; b0 < hi; b0 += kSumBlock) {
            const long b1 = std::min(hi, b0 + kSumBlock);
            coordinate.before_block(k, b1, hi);
            long block_lost = 0;
#pragma omp simd reduction(+ : block_lost)
            for (long i = b0; i < b1; i++) block_lost += coordinate(k, i).lost;
            lost += block_lost;
        }
    }
    return lost;
}

// The same update measured: each coordinate also goes into its block's float
// sums, for a tensor whose slices are `per` elements long. One parallel
// region for the whole range (a region per slice waited at every join for a
// descheduled thread on a loaded machine), blocks split at slice boundaries,
// each thread's sums per slice added once at the end into sums[0..] (the
// range's first slice first).
template <class Update, class Coordinate>
static long measured_update(long lo, long hi, long per, UpdateSums* sums, const Update& shared,
                            const Coordinate& coordinate) {
    const long first = lo / per, n = (hi - 1) / per - first + 1;
    std::vector<UpdateSums> total(n);
    long lost = 0;
#pragma omp parallel reduction(+ : lost)
    {
        const Update k = shared;
        std::vector<UpdateSums> mine(n);
#pragma omp for schedule(static)
        for (long b0 = lo; b0 < hi; b0 += kSumBlock) {
            const long b1 = std::min(hi, b0 + kSumBlock);
            coordinate.before_block(k, b1, hi);
            for (long s0 = b0; s0 < b1;) {
                const long slice = s0 / per, s1 = std::min(b1, (slice + 1) * per);
                float g2 = 0.0f, w2 = 0.0f, n2 = 0.0f, u2 = 0.0f, e = 0.0f, mo = 0.0f;
                long block_lost = 0;
#pragma omp simd reduction(+ : g2, w2, n2, u2, e, mo, block_lost)
                for (long i = s0; i < s1; i++) {
                    const MeasuredCoordinate c = coordinate(k, i);
                    add_coordinate(g2, w2, n2, u2, e, mo, c.g, c.w, c.stored, c.v, c.v_hat, k.eps);
                    block_lost += c.lost;
                }
                add_block(mine[slice - first], g2, w2, n2, u2, e, mo);
                lost += block_lost;
                s0 = s1;
            }
        }
#pragma omp critical
        for (long j = 0; j < n; j++) add_sums(total[j], mine[j]);
    }
    std::copy(total.begin(), total.end(), sums);
    return lost;
}

struct AdamW::StepConstants {
    float b1, b2, bc1, bc2, eps, lr, grad_scale;
    bool sr_params, sr_moments;
};

// One tensor's (shard range's) AdamW update in fp32. Element i of the
// tensor is at p[i], g[i], m[i] and v[i].
struct Fp32Update {
    float* p;        // weights
    const float* g;  // gradients, read times scale (clipping's factor)
    float *m, *v;    // moments
    float b1, b2, bc1, bc2, eps, lr, wd, scale;
};

static inline MeasuredCoordinate fp32_coordinate(const Fp32Update& u, long i) {
    float *p = u.p, *m = u.m, *v = u.v;
    const float g = u.g[i] * u.scale;  // x * 1.0f is x: unclipped gradients as they are
    const float w = p[i];
    m[i] = u.b1 * m[i] + (1.0f - u.b1) * g;
    v[i] = u.b2 * v[i] + (1.0f - u.b2) * g * g;
    float m_hat = m[i] / u.bc1;
    float v_hat = v[i] / u.bc2;
    p[i] -= u.lr * (m_hat / (std::sqrt(v_hat) + u.eps) + u.wd * p[i]);
    return {g, w, p[i], v[i], v_hat, false};
}

// Each coordinate as a type of its own (not a function pointer), so that it
// is inlined into the loop.
struct Fp32Coordinate {
    void before_block(const Fp32Update&, long, long) const {}
    MeasuredCoordinate operator()(const Fp32Update& u, long i) const { return fp32_coordinate(u, i); }
};

// The same update in the pure bf16 modes: moments (and the Kahan
// compensation) stored in bf16, the arithmetic in fp32. The rounding choices
// are template parameters so each variant's loop has no branch and
// vectorizes.
struct Bf16Update {
    float* p;        // weights, element i at p[i]
    const float* g;  // gradients (bf16 values), read times scale and rounded to bf16
    bf16 *m, *v;     // moments, element i at m[i]
    bf16* c;         // Kahan compensation like the moments, or null
    float b1, b2, bc1, bc2, eps, lr, wd, scale;
    uint64_t key_p, key_m, key_v;  // rounding bits (stochastic rounding)
};

// Coordinate i of a bf16 update: the weight stored, what the measurement
// needs returned, and whether the update was lost in rounding.
template <bool kSrParams, bool kSrMoments, bool kKahan>
static inline MeasuredCoordinate bf16_coordinate(const Bf16Update& u, long i) {
    // A bf16 value times 1.0f rounds to itself: unclipped gradients as they are.
    const float g = bf16_to_float(float_to_bf16_rne(u.g[i] * u.scale));
    const float w = u.p[i];
    const float mi = u.b1 * bf16_to_float(u.m[i]) + (1.0f - u.b1) * g;
    const float vi = u.b2 * bf16_to_float(u.v[i]) + (1.0f - u.b2) * g * g;
    // The narrowed moments are used from registers, never read back: m and v
    // may alias as far as the compiler knows, so m[i] was reloaded after v[i]
    // was stored, as a wider load than the store, which cannot be forwarded
    // (the load waited for the store to reach the cache: config M's bf16
    // update at 12 GB/s against 26 GB/s for Kahan's, a Xeon with AMX).
    const bf16 m16 = to_bf16(mi, kSrMoments, kSrMoments ? rounding_bits_at(u.key_m, i) : 0);
    const bf16 v16 = to_bf16(vi, kSrMoments, kSrMoments ? rounding_bits_at(u.key_v, i) : 0);
    u.m[i] = m16;
    u.v[i] = v16;
    const float m_hat = bf16_to_float(m16) / u.bc1;
    const float v_hat = bf16_to_float(v16) / u.bc2;
    const float update = -u.lr * (m_hat / (std::sqrt(v_hat) + u.eps) + u.wd * w);
    float stored;
    if constexpr (kKahan) {  // the update plus what earlier roundings lost
        const float y = update - bf16_to_float(u.c[i]);
        stored = bf16_to_float(to_bf16(w + y, false, 0));
        u.c[i] = to_bf16((stored - w) - y, false, 0);
    } else {
        stored = bf16_to_float(to_bf16(w + update, kSrParams, kSrParams ? rounding_bits_at(u.key_p, i) : 0));
    }
    u.p[i] = stored;
    // & rather than &&: a branch kept the loop scalar.
    return {g, w, stored, bf16_to_float(v16), v_hat, (bool)((update != 0.0f) & (stored == w))};
}

// Either update over [lo, hi), measured into `sums` when it is not null.
template <class Update, class Coordinate>
static long update(long lo, long hi, long per, UpdateSums* sums, const Update& u, const Coordinate& coordinate) {
    return sums ? measured_update(lo, hi, per, sums, u, coordinate) : unmeasured_update(lo, hi, u, coordinate);
}

template <bool kSrParams, bool kSrMoments, bool kKahan>
struct Bf16Coordinate {
    // With stochastic rounding, the next block's streams are asked for before
    // each block (cache_hints.h): config M's bf16_sr update 56-59 -> 39-43 ms a
    // step (a Xeon with AMX), bf16's 29-31. The other variants lost by it
    // (Kahan's 31 -> 39 ms) or did not move. next: where the next block
    // starts; end: where the range ends. Inlined by force, as prefetch_span.
    [[gnu::always_inline]] void before_block(const Bf16Update& u, long next, long end) const {
        if constexpr (kSrParams) {
            const long n = std::min(end, next + kSumBlock) - next;
            if (n <= 0) return;
            prefetch_span(u.g + next, n * (long)sizeof(float));
            prefetch_span<true>(u.p + next, n * (long)sizeof(float));
            prefetch_span<true>(u.m + next, n * (long)sizeof(bf16));
            prefetch_span<true>(u.v + next, n * (long)sizeof(bf16));
        }
    }
    MeasuredCoordinate operator()(const Bf16Update& u, long i) const {
        return bf16_coordinate<kSrParams, kSrMoments, kKahan>(u, i);
    }
};

template <bool kSrParams, bool kSrMoments, bool kKahan>
static long bf16_update(const Bf16Update& u, long lo, long hi, long per, UpdateSums* sums) {
    return update(lo, hi, per, sums, u, Bf16Coordinate<kSrParams, kSrMoments, kKahan>{});
}

static long bf16_update(const Bf16Update& u, long lo, long hi, long per, bool kahan, bool sr_moments,
                        bool sr_params, UpdateSums* sums) {
    if (kahan) return bf16_update<false, false, true>(u, lo, hi, per, sums);
    if (sr_moments) return bf16_update<true, true, false>(u, lo, hi, per, sums);
    if (sr_params) return bf16_update<true, false, false>(u, lo, hi, per, sums);
    return bf16_update<false, false, false>(u, lo, hi, per, sums);
}

long update_slices(const std::vector<TensorKind>& kinds) {
    long n = 0;
    for (const TensorKind& k : kinds) n += k.layers ? k.layers : 1;
    return n;
}

long AdamW::update_range(const StepConstants& c, const TensorKind& k, size_t ki, float* p, const float* g, long lo,
                         long hi, UpdateSums* sums) {
    const long per = k.numel() / (k.layers ? k.layers : 1);  // a slice's elements
    bool decay = config_.decay_norms_and_embeddings || !k.norm_or_embedding;
    const float wd = decay ? (float)config_.weight_decay : 0.0f;
    // Moments are kept for the shard only: element i of the tensor is at
    // k.offset + i - begin_ there.
    const long at = k.offset - begin_;
    if (!precision_.bf16_state()) {
        const Fp32Update u{p, g, m_.f32() + at, v_.f32() + at, c.b1, c.b2, c.bc1, c.bc2, c.eps, c.lr, wd,
                           c.grad_scale};
        update(lo, hi, per, sums, u, Fp32Coordinate{});
        return 0;
    }
    // The same update computed in fp32 from bf16 values and written back
    // as bf16. Three streams of rounding bits per tensor (weights, first
    // and second moment); elements are numbered within the tensor, so the
    // bits do not depend on how the flat buffer is laid out or split.
    const Bf16Update u{p, g, m_.b16() + at, v_.b16() + at, c_ ? c_->b16() + at : nullptr,
                       c.b1, c.b2, c.bc1, c.bc2, c.eps, c.lr, wd, c.grad_scale,
                       rounding_key(rounding_seed_, t_, 3 * ki), rounding_key(rounding_seed_, t_, 3 * ki + 1),
                       rounding_key(rounding_seed_, t_, 3 * ki + 2)};
    return bf16_update(u, lo, hi, per, c_.has_value(), c.sr_moments, c.sr_params, sums);
}

long AdamW::update_range_owned(const StepConstants& c, const TensorKind& k, size_t ki, float* p, const float* g,
                               long lo, long hi, long shared, UpdateSums* sums) {
    const long slices = k.layers ? k.layers : 1, per = k.numel() / slices;
    long lost = 0;
    for (long l = lo / per; l < slices && l * per < hi; l++) {
        const long own_lo = std::max(lo, l * per), own_hi = std::min(hi, (l + 1) * per - shared);
        const long shared_lo = std::max(lo, (l + 1) * per - shared), shared_hi = std::min(hi, (l + 1) * per);
        if (own_lo < own_hi) {
            UpdateSums own{};
            lost += update_range(c, k, ki, p, g, own_lo, own_hi, sums ? &own : nullptr);
            if (sums) add_sums(sums[l - lo / per], own);
        }
        if (shared_lo < shared_hi) update_range(c, k, ki, p, g, shared_lo, shared_hi, nullptr);
    }
    return lost;
}

void AdamW::step(Model& model, double lr, std::vector<UpdateSums>* sums, float grad_scale) {
    t_++;
    const bool sr_params = precision_.mode == PrecisionMode::Bf16Sr;
    const StepConstants c{(float)config_.beta1, (float)config_.beta2,
                          (float)(1.0 - std::pow(config_.beta1, (double)t_)),
                          (float)(1.0 - std::pow(config_.beta2, (double)t_)), (float)config_.eps, (float)lr,
                          grad_scale, sr_params, sr_params && precision_.sr_moments};
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
        // Measured: the sums of the slices [lo, hi) touches, from lo's on.
        UpdateSums* measured = sums ? &(*sums)[slice0 + lo / per] : nullptr;
        const long shared = model.shard().leads_kv_group() ? 0 : k.shared_rows * k.cols;
        long lost = 0;
        if (lo < hi)
            lost = shared > 0 ? update_range_owned(c, k, ki, p, g, lo, hi, shared, measured)
                              : update_range(c, k, ki, p, g, lo, hi, measured);
        if (precision_.bf16_state()) lost_[ki] = lost;
        slice0 += slices;
    }
}

}  // namespace hlat
