// Kernels of the LLaMA block. Matmuls go to sgemm (trainer/model/sgemm.h); everything
// else is a plain loop over rows, parallel across rows with OpenMP, vectorized
// by the compiler. sgemm called inside a parallel region runs on the calling
// thread only, so the per-head attention gemms never oversubscribe.
#include "trainer/model/kernels.h"

#include "trainer/model/bf16.h"
#include "trainer/model/cache_hints.h"
#include "trainer/model/kernels_bf16.h"
#include "trainer/model/qkv_layout.h"
#include "trainer/model/sgemm.h"
#include "trainer/model/vector_math.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace hlat {

// x, or its bf16 value when kRound: a bf16 matmul's fp32 sum, rounded as read.
template <bool kRound>
static inline float load(float x) {
    return kRound ? bf16_value(x) : x;
}
// A bf16 tensor stored in bf16: its value, already rounded.
template <bool kRound>
static inline float load(bf16 x) {
    static_assert(kRound, "bf16 values are read only where the kernel rounds");
    return bf16_to_float(x);
}
// A kernel's result, into an fp32 buffer as is or into a bf16 one narrowed.
static inline void store(float& y, float v) { y = v; }
static inline void store(bf16& y, float v) { y = float_to_bf16_rne(v); }

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    sgemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC, bool accumulate) {
    matmul_dinput(dinp, dout, weight, N, IC, OC);
    matmul_dweight(dweight, dout, inp, N, IC, OC, accumulate);
}

void matmul_dinput(float* dinp, const float* dout, const float* weight, int N, int IC, int OC) {
    sgemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
}

void matmul_dweight(float* dweight, const float* dout, const float* inp, int N, int IC, int OC, bool accumulate) {
    sgemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, accumulate ? 1.0f : 0.0f, dweight, IC);
}

void embedding_forward(float* out, const int32_t* tokens, const float* embed, int N, int C) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        std::memcpy(out + (long)n * C, embed + (long)tokens[n] * C, sizeof(float) * C);
    }
}

void embedding_backward(float* dembed, const float* dout, const int32_t* tokens, int N, int C) {
    // Serial: two rows may share a token, and the scatter is cheap next to the matmuls.
    for (int n = 0; n < N; n++) {
        float* row = dembed + (long)tokens[n] * C;
        const float* d = dout + (long)n * C;
        for (int c = 0; c < C; c++) row[c] += d[c];
    }
}

template <typename Out>
static void rmsnorm_rows(Out* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        Out* y = out + (long)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / std::sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) store(y[c], x[c] * r * weight[c]);
        rstd[n] = r;
    }
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
    rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}

void rmsnorm_forward_bf16(bf16* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
    rmsnorm_rows(out, rstd, inp, weight, N, C, eps);
}

template <bool kRoundDout>
HLAT_WIDE_VECTORS static void rmsnorm_backward_rows(float* dinp, float* dweight, const float* dout,
                                                    const float* inp, const float* weight, const float* rstd, int N,
                                                    int C, Bf16StreamGrad out = {}) {
    // y = x r w with r = (mean(x^2) + eps)^-1/2, so
    // dx = r w dy - x r^3 / C * sum_j(dy_j w_j x_j).
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        const float* dy = dout + (long)n * C;
        float* dx = dinp + (long)n * C;
        // The next row asked for (cache_hints.h): config M's rmsnorm backward,
        // with the gains' gradients in parallel below, 18.8 -> 16.2-16.6 ms a
        // step in bf16 (a Xeon with AMX).
        if (n + 1 < N) {
            prefetch_span(x + C, C * sizeof(float));
            prefetch_span(dy + C, C * sizeof(float));
            prefetch_span(dx + C, C * sizeof(float));
        }
        float r = rstd[n];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot) safelen(8)
        for (int c = 0; c < C; c++) dot += load<kRoundDout>(dy[c]) * weight[c] * x[c];
        float k = dot * r * r * r / C;
        for (int c = 0; c < C; c++) dx[c] += r * weight[c] * load<kRoundDout>(dy[c]) - k * x[c];
        // The row still in cache: a pass each over memory saved (config M,
        // bf16, a Xeon with AMX: "round to bf16" 4.7 ms and most of "narrow
        // to bf16" 3.9 ms a step, for 2 MB more written a layer).
        if (out.round)
            for (int c = 0; c < C; c++) dx[c] = bf16_value(dx[c]);
        if (out.narrowed) {
            bf16* dx16 = out.narrowed + (long)n * C;
            for (int c = 0; c < C; c++) dx16[c] = float_to_bf16_rne(dx[c]);
        }
    }
    // The gains' gradients: each thread its own columns (whole cache lines of
    // dweight), every column's sum over the rows in row order (a fixed order
    // whatever the thread count).
#pragma omp parallel
    {
        const int threads = omp_get_num_threads(), t = omp_get_thread_num();
        constexpr int kLine = (int)(kCacheLineBytes / sizeof(float));
        const int lines = (C + kLine - 1) / kLine;
        const int c0 = std::min(C, lines * t / threads * kLine);
        const int c1 = std::min(C, lines * (t + 1) / threads * kLine);
        for (int n = 0; n < N; n++) {
            const float* x = inp + (long)n * C;
            const float* dy = dout + (long)n * C;
            float r = rstd[n];
            for (int c = c0; c < c1; c++) dweight[c] += load<kRoundDout>(dy[c]) * x[c] * r;
        }
    }
}

void rmsnorm_backward_accumulate(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C) {
    rmsnorm_backward_rows<false>(dinp, dweight, dout, inp, weight, rstd, N, C);
}

void rmsnorm_backward_accumulate_bf16(float* dinp, float* dweight, const float* dout, const float* inp,
                                      const float* weight, const float* rstd, int N, int C, Bf16StreamGrad out) {
    rmsnorm_backward_rows<true>(dinp, dweight, dout, inp, weight, rstd, N, C, out);
}

// Head h of row n of a qkv-shaped array (N, QKV): its first float.
static inline long qkv_head(int n, int h, int QKV, int HD) { return (long)n * QKV + (long)h * HD; }

template <bool kRound>
static void qk_norm_rows(float* qkv, float* inp, float* rstd, const float* q_weight, const float* k_weight, int N,
                         int NH, int NKV, int HD, float eps) {
    const int QKV = (NH + 2 * NKV) * HD, heads = NH + NKV;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            float* x = qkv + qkv_head(n, h, QKV, HD);
            const float* w = h < NH ? q_weight : k_weight;
            for (int i = 0; i < HD; i++) x[i] = load<kRound>(x[i]);
            if (inp) std::memcpy(inp + ((long)n * heads + h) * HD, x, sizeof(float) * HD);
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int i = 0; i < HD; i++) ss += x[i] * x[i];
            float r = 1.0f / std::sqrt(ss / HD + eps);
            for (int i = 0; i < HD; i++) x[i] = load<kRound>(x[i] * r * w[i]);
            rstd[(long)n * heads + h] = r;
        }
    }
}

void qk_norm_forward(float* qkv, float* inp, float* rstd, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int HD, float eps) {
    qk_norm_rows<false>(qkv, inp, rstd, q_weight, k_weight, N, NH, NKV, HD, eps);
}

void qk_norm_forward_bf16(float* qkv, float* inp, float* rstd, const float* q_weight, const float* k_weight, int N,
                          int NH, int NKV, int HD, float eps) {
    qk_norm_rows<true>(qkv, inp, rstd, q_weight, k_weight, N, NH, NKV, HD, eps);
}

// rmsnorm_backward_rows over heads: the gains' gradients first (they read dy
// before it is overwritten; serial, so their sums come in a fixed order), then
// dx = r w dy - x r^3 / HD * sum_j(dy_j w_j x_j) in place of dy.
template <bool kRoundDout>
static void qk_norm_backward_rows(float* dqkv, float* dq_weight, float* dk_weight, const float* inp,
                                  const float* q_weight, const float* k_weight, const float* rstd, int N, int NH,
                                  int NKV, int HD) {
    const int QKV = (NH + 2 * NKV) * HD, heads = NH + NKV;
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            const float* dy = dqkv + qkv_head(n, h, QKV, HD);
            const float* x = inp + ((long)n * heads + h) * HD;
            const float r = rstd[(long)n * heads + h];
            float* dw = h < NH ? dq_weight : dk_weight;
            for (int i = 0; i < HD; i++) dw[i] += load<kRoundDout>(dy[i]) * x[i] * r;
        }
    }
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < heads; h++) {
            float* dy = dqkv + qkv_head(n, h, QKV, HD);
            const float* x = inp + ((long)n * heads + h) * HD;
            const float* w = h < NH ? q_weight : k_weight;
            const float r = rstd[(long)n * heads + h];
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < HD; i++) dot += load<kRoundDout>(dy[i]) * w[i] * x[i];
            const float k = dot * r * r * r / HD;
            for (int i = 0; i < HD; i++) dy[i] = r * w[i] * load<kRoundDout>(dy[i]) - k * x[i];
        }
    }
}

void qk_norm_backward(float* dqkv, float* dq_weight, float* dk_weight, const float* inp, const float* q_weight,
                      const float* k_weight, const float* rstd, int N, int NH, int NKV, int HD) {
    qk_norm_backward_rows<false>(dqkv, dq_weight, dk_weight, inp, q_weight, k_weight, rstd, N, NH, NKV, HD);
}

void qk_norm_backward_bf16(float* dqkv, float* dq_weight, float* dk_weight, const float* inp, const float* q_weight,
                           const float* k_weight, const float* rstd, int N, int NH, int NKV, int HD) {
    qk_norm_backward_rows<true>(dqkv, dq_weight, dk_weight, inp, q_weight, k_weight, rstd, N, NH, NKV, HD);
}

void rope_tables(float* cos_table, float* sin_table, int T, int HD, float theta) {
    int half = HD / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            // Angles in double: at long contexts t * freq loses digits in fp32.
            double freq = std::pow((double)theta, -2.0 * i / HD);
            double angle = t * freq;
            cos_table[t * half + i] = (float)std::cos(angle);
            sin_table[t * half + i] = (float)std::sin(angle);
        }
    }
}

// Rotates every head of the first (NH + NKV) heads of each qkv row of `in` by
// the angle of its position into `out` (which may be `in`, both row-major, or
// a head-major bf16 array); sign = -1 applies the inverse rotation (the
// transpose). With kRound the values are rounded to bf16 as read (or are
// bf16 already) and once more as rotated. The v heads are carried over when
// that changes them: rounded, or narrowed into a bf16 output.
template <bool kRound, typename Out, typename In>
HLAT_WIDE_VECTORS static void rope_rotate(Out* out, QkvLayout out_layout, const In* in, const float* cos_table,
                                          const float* sin_table, int B, int T, int NH, int NKV, int HD, float sign) {
    constexpr bool kCarryV = kRound || !std::is_same_v<Out, float>;
    int half = HD / 2;
    int QKV = (NH + 2 * NKV) * HD;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const In* row = in + ((long)b * T + t) * QKV;
            Out* out_row = out + (long)b * T * QKV + t * out_layout.row;
            const float* cs = cos_table + (long)t * half;
            const float* sn = sin_table + (long)t * half;
            // The next row asked for where the output is bf16 (cache_hints.h):
            // config M's bf16 RoPE forward 13.2 -> 9.6-9.8 ms a step, backward
            // 6.8 -> 5.0 (a Xeon with AMX).
            if (!std::is_same_v<Out, float> && t + 1 < T) prefetch_span(row + QKV, QKV * sizeof(In));
            for (int h = 0; h < NH + NKV; h++) {
                const In* x = row + h * HD;
                Out* y = out_row + h * out_layout.head;
                for (int i = 0; i < half; i++) {
                    float x1 = load<kRound>(x[i]), x2 = load<kRound>(x[i + half]);
                    float s = sign * sn[i];
                    store(y[i], load<kRound>(x1 * cs[i] - x2 * s));
                    store(y[i + half], load<kRound>(x2 * cs[i] + x1 * s));
                }
            }
            if constexpr (kCarryV)
                for (int h = NH + NKV; h < NH + 2 * NKV; h++) {
                    Out* y = out_row + h * out_layout.head;
                    for (int i = 0; i < HD; i++) store(y[i], load<kRound>(row[h * HD + i]));
                }
        }
    }
}

void rope_forward(float* qkv, const float* cos_table, const float* sin_table, int B, int T, int NH,
                  int NKV, int HD) {
    const QkvLayout rows = QkvLayout::row_major((NH + 2 * NKV) * HD, HD);
    rope_rotate<false>(qkv, rows, qkv, cos_table, sin_table, B, T, NH, NKV, HD, 1.0f);
}

void rope_backward(float* dqkv, const float* cos_table, const float* sin_table, int B, int T,
                   int NH, int NKV, int HD) {
    const QkvLayout rows = QkvLayout::row_major((NH + 2 * NKV) * HD, HD);
    rope_rotate<false>(dqkv, rows, dqkv, cos_table, sin_table, B, T, NH, NKV, HD, -1.0f);
}

void rope_forward_bf16(bf16* heads, const float* qkv, const float* cos_table, const float* sin_table, int B, int T,
                       int NH, int NKV, int HD) {
    rope_rotate<true>(heads, QkvLayout::head_major(T, HD), qkv, cos_table, sin_table, B, T, NH, NKV, HD, 1.0f);
}

void rope_forward_bf16(bf16* heads, const bf16* qkv16, const float* cos_table, const float* sin_table, int B, int T,
                       int NH, int NKV, int HD) {
    rope_rotate<true>(heads, QkvLayout::head_major(T, HD), qkv16, cos_table, sin_table, B, T, NH, NKV, HD, 1.0f);
}

void rope_forward_bf16_values(float* qkv, const float* cos_table, const float* sin_table, int B, int T, int NH,
                              int NKV, int HD) {
    const QkvLayout rows = QkvLayout::row_major((NH + 2 * NKV) * HD, HD);
    rope_rotate<true>(qkv, rows, qkv, cos_table, sin_table, B, T, NH, NKV, HD, 1.0f);
}

void rope_backward_bf16(bf16* dqkv16, const float* dqkv, const float* cos_table, const float* sin_table, int B,
                        int T, int NH, int NKV, int HD) {
    const QkvLayout rows = QkvLayout::row_major((NH + 2 * NKV) * HD, HD);
    rope_rotate<false>(dqkv16, rows, dqkv, cos_table, sin_table, B, T, NH, NKV, HD, -1.0f);
}

void qkv_heads_bf16(bf16* heads, const float* qkv, int B, int T, int NH, int NKV, int HD) {
    const int NQKV = NH + 2 * NKV;
    const QkvLayout to = QkvLayout::head_major(T, HD);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* row = qkv + ((long)b * T + t) * NQKV * HD;
            bf16* out_row = heads + (long)b * T * NQKV * HD + t * to.row;
            for (int h = 0; h < NQKV; h++)
                for (int i = 0; i < HD; i++) out_row[h * to.head + i] = float_to_bf16_rne(row[h * HD + i]);
        }
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + vexp(-x)); }

void swiglu_forward(float* out, const float* gate_up, int N, int H) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* g = gate_up + (long)n * 2 * H;
        const float* u = g + H;
        float* y = out + (long)n * H;
        for (int i = 0; i < H; i++) y[i] = g[i] * sigmoid(g[i]) * u[i];
    }
}

HLAT_WIDE_VECTORS void swiglu_forward_bf16(bf16* out, const bf16* gate_up16, int N, int H) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const bf16* g16 = gate_up16 + (long)n * 2 * H;
        const bf16* u16 = g16 + H;
        bf16* y = out + (long)n * H;
        // The next row asked for (cache_hints.h): 14.3 -> 11.4-11.9 ms a step,
        // config M (a Xeon with AMX).
        if (n + 1 < N) prefetch_span(gate_up16 + (long)(n + 1) * 2 * H, 2L * H * sizeof(bf16));
        for (int i = 0; i < H; i++) {
            const float gate = bf16_to_float(g16[i]);
            store(y[i], gate * sigmoid(gate) * bf16_to_float(u16[i]));
        }
    }
}

static inline float widen(float x) { return x; }
static inline float widen(bf16 x) { return bf16_to_float(x); }

template <bool kBf16, typename Out, typename In>
HLAT_WIDE_VECTORS static void swiglu_backward_rows(Out* dgate_up, const In* dout, const In* gate_up, int N, int H) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const In* g = gate_up + (long)n * 2 * H;
        const In* u = g + H;
        const In* dy = dout + (long)n * H;
        Out* dg = dgate_up + (long)n * 2 * H;
        Out* du = dg + H;
        // The next row's inputs asked for in the bf16 modes (cache_hints.h), whose
        // loop rounds by hand: config M 28 -> 21 ms a step (a Xeon with AMX).
        // fp32's loop streams at 30 GB/s without; asking for the outputs too,
        // or in fp32, cost time (fp32 15 -> 23 ms).
        if (kBf16 && n + 1 < N) {
            prefetch_span(gate_up + (long)(n + 1) * 2 * H, 2L * H * sizeof(In));
            prefetch_span(dout + (long)(n + 1) * H, (long)H * sizeof(In));
        }
        for (int i = 0; i < H; i++) {
            const float gate = widen(g[i]), up = widen(u[i]);
            float s = sigmoid(gate);
            float silu = gate * s;
            float d = widen(dy[i]);
            // Written so the vectorized loop gives the bits the scalar one did:
            // GCC 12 contracted the fp32 instantiation's inner term to an fma
            // and not the bf16 one's; the vectorized loops contract the other
            // way round unless told (measured on every mode, bit for bit).
            const float dsilu = kBf16 ? 1.0f + gate * (1.0f - s) : std::fma(gate, 1.0f - s, 1.0f);
            store(dg[i], d * up * s * dsilu);
            store(du[i], d * silu);
        }
    }
}

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int H) {
    swiglu_backward_rows<false>(dgate_up, dout, gate_up, N, H);
}

void swiglu_backward_bf16(bf16* dgate_up, const bf16* dout16, const bf16* gate_up16, int N, int H) {
    swiglu_backward_rows<true>(dgate_up, dout16, gate_up16, N, H);
}

void residual_forward(float* out, const float* a, const float* b, long n) {
#pragma omp parallel for
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

template <typename A>
static void residual_rows_bf16(float* out, const A* a, const float* b, long n, bool round_sum) {
    if (round_sum) {
#pragma omp parallel for
        for (long i = 0; i < n; i++) out[i] = bf16_value(load<true>(a[i]) + b[i]);
        return;
    }
#pragma omp parallel for
    for (long i = 0; i < n; i++) out[i] = load<true>(a[i]) + b[i];
}

void residual_forward_bf16(float* out, const float* a, const float* b, long n, bool round_sum) {
    residual_rows_bf16(out, a, b, n, round_sum);
}

void residual_forward_bf16(float* out, const bf16* a, const float* b, long n, bool round_sum) {
    residual_rows_bf16(out, a, b, n, round_sum);
}

template <bool kRoundLogits>
HLAT_WIDE_VECTORS static void crossentropy_rows(float* logits, float* losses, float* logz, const int32_t* targets,
                                                 int N, int V, float* row_max) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) {
            if constexpr (kRoundLogits) row[v] = bf16_value(row[v]);
            maxv = row[v] > maxv ? row[v] : maxv;
        }
        float target_logit = row[targets[n]];
        // A vector sum, as attention's softmax (exp_row): in index order it
        // costs a dependent add per logit.
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum) safelen(8)
        for (int v = 0; v < V; v++) {
            const float e = vexp(row[v] - maxv);
            row[v] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) row[v] *= inv;
        const float log_z = std::log(sum) + maxv;
        losses[n] = log_z - target_logit;
        if (logz) logz[n] = log_z;
        if (row_max) row_max[n] = maxv;
    }
}

void crossentropy_forward(float* logits, float* losses, float* logz, const int32_t* targets, int N, int V,
                          float* row_max) {
    crossentropy_rows<false>(logits, losses, logz, targets, N, V, row_max);
}

void crossentropy_forward_bf16(float* logits, float* losses, float* logz, const int32_t* targets, int N, int V,
                               float* row_max) {
    crossentropy_rows<true>(logits, losses, logz, targets, N, V, row_max);
}

// The z-loss z (log Z)^2 adds 2 z log Z dlogZ/dlogit = 2 z log Z p to each
// logit's gradient: the probabilities' factor in row n.
static inline float z_loss_factor(const float* logz, float z_loss, int n) {
    return z_loss > 0.0f ? 1.0f + 2.0f * z_loss * logz[n] : 1.0f;
}

void crossentropy_backward(float* logits, const int32_t* targets, const float* logz, float z_loss, float dloss, int N,
                           int V) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        const float scale = dloss * z_loss_factor(logz, z_loss, n);
        for (int v = 0; v < V; v++) row[v] *= scale;
        row[targets[n]] -= dloss;
    }
}

HLAT_WIDE_VECTORS void crossentropy_backward_bf16(bf16* dlogits, const float* probs, const int32_t* targets,
                                                    const float* logz, float z_loss, float dloss, int N, int V) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* p = probs + (long)n * V;
        bf16* d = dlogits + (long)n * V;
        const float scale = dloss * z_loss_factor(logz, z_loss, n);
        for (int v = 0; v < V; v++) store(d[v], p[v] * scale);
        store(d[targets[n]], p[targets[n]] * scale - dloss);
    }
}

}  // namespace hlat
