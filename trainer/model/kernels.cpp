// Kernels of the LLaMA block. Matmuls go to sgemm (trainer/model/sgemm.h); everything
// else is a plain loop over rows, parallel across rows with OpenMP, vectorized
// by the compiler. sgemm called inside a parallel region runs on the calling
// thread only, so the per-head attention gemms never oversubscribe.
#include "trainer/model/kernels.h"

#include "trainer/model/bf16.h"
#include "trainer/model/sgemm.h"
#include "trainer/model/vector_math.h"

#include <omp.h>

#include <cmath>
#include <cstring>

namespace hlat {

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    sgemm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
    sgemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    sgemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
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

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        float* y = out + (long)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / std::sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
        rstd[n] = r;
    }
}

void rmsnorm_backward_accumulate(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C) {
    // y = x r w with r = (mean(x^2) + eps)^-1/2, so
    // dx = r w dy - x r^3 / C * sum_j(dy_j w_j x_j).
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        const float* dy = dout + (long)n * C;
        float* dx = dinp + (long)n * C;
        float r = rstd[n];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += dy[c] * weight[c] * x[c];
        float k = dot * r * r * r / C;
        for (int c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
    }
    for (int n = 0; n < N; n++) {
        const float* x = inp + (long)n * C;
        const float* dy = dout + (long)n * C;
        float r = rstd[n];
        for (int c = 0; c < C; c++) dweight[c] += dy[c] * x[c] * r;
    }
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

// Rotates every head of the first (NH + NKV) heads of each qkv row by the angle
// of its position; sign = -1 applies the inverse rotation (the transpose).
static void rope_rotate(float* qkv, const float* cos_table, const float* sin_table, int B, int T,
                        int NH, int NKV, int HD, float sign) {
    int half = HD / 2;
    int QKV = (NH + 2 * NKV) * HD;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* row = qkv + ((long)b * T + t) * QKV;
            const float* cs = cos_table + (long)t * half;
            const float* sn = sin_table + (long)t * half;
            for (int h = 0; h < NH + NKV; h++) {
                float* x = row + h * HD;
                for (int i = 0; i < half; i++) {
                    float x1 = x[i], x2 = x[i + half];
                    float s = sign * sn[i];
                    x[i] = x1 * cs[i] - x2 * s;
                    x[i + half] = x2 * cs[i] + x1 * s;
                }
            }
        }
    }
}

void rope_forward(float* qkv, const float* cos_table, const float* sin_table, int B, int T, int NH,
                  int NKV, int HD) {
    rope_rotate(qkv, cos_table, sin_table, B, T, NH, NKV, HD, 1.0f);
}

void rope_backward(float* dqkv, const float* cos_table, const float* sin_table, int B, int T,
                   int NH, int NKV, int HD) {
    rope_rotate(dqkv, cos_table, sin_table, B, T, NH, NKV, HD, -1.0f);
}

// Scores of one (batch, head) pair, P = softmax(scale * Q K^T) under the causal
// mask: query i sees keys j <= i + lookahead (lookahead is 0 except when the
// mask_leak fault is injected). Rows are computed in blocks: block rows
// [r0, r1) only see keys [0, r1 + lookahead), which skips most of the masked
// upper triangle instead of computing and discarding it.
static constexpr int kAttBlock = 64;

static inline int visible_keys(int r1, int T, int lookahead) { return r1 + lookahead < T ? r1 + lookahead : T; }

static void attention_probs(float* P, const float* q, const float* k, int T, int HD, int QKV, float scale,
                            int lookahead, bool probs_bf16) {
    for (int r0 = 0; r0 < T; r0 += kAttBlock) {
        int r1 = r0 + kAttBlock < T ? r0 + kAttBlock : T;
        sgemm(false, true, r1 - r0, visible_keys(r1, T, lookahead), HD, scale, q + (long)r0 * QKV, QKV, k, QKV, 0.0f,
              P + (long)r0 * T, T);
    }
    for (int i = 0; i < T; i++) {
        float* row = P + (long)i * T;
        const int last = i + lookahead < T ? i + lookahead : T - 1;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int j = 0; j <= last; j++) maxv = row[j] > maxv ? row[j] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= last; j++) {
            row[j] = vexp(row[j] - maxv);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= last; j++) row[j] *= inv;
        if (probs_bf16)
            for (int j = 0; j <= last; j++) row[j] = bf16_to_float(float_to_bf16_rne(row[j]));
        for (int j = last + 1; j < T; j++) row[j] = 0.0f;
    }
}

// Y (T, HD, ld ldy) = P (T, T) @ X (T, HD, ld ldx), using that P is zero past
// each row's visible keys.
static void causal_matmul(float* Y, int ldy, const float* P, const float* X, int ldx, int T, int HD, float beta,
                          int lookahead) {
    for (int r0 = 0; r0 < T; r0 += kAttBlock) {
        int r1 = r0 + kAttBlock < T ? r0 + kAttBlock : T;
        sgemm(false, false, r1 - r0, HD, visible_keys(r1, T, lookahead), 1.0f, P + (long)r0 * T, T, X, ldx, beta,
              Y + (long)r0 * ldy, ldy);
    }
}

// Y (T, HD, ld ldy) += P^T (T, T) @ X (T, HD, ld ldx): key block [c0, c1) is
// seen by query rows [c0 - lookahead, T) only.
static void causal_matmul_transposed(float* Y, int ldy, const float* P, const float* X, int ldx, int T, int HD,
                                     int lookahead) {
    for (int c0 = 0; c0 < T; c0 += kAttBlock) {
        int c1 = c0 + kAttBlock < T ? c0 + kAttBlock : T;
        int first_row = c0 - lookahead > 0 ? c0 - lookahead : 0;
        sgemm(true, false, c1 - c0, HD, T - first_row, 1.0f, P + (long)first_row * T + c0, T,
              X + (long)first_row * ldx, ldx, 1.0f, Y + (long)c0 * ldy, ldy);
    }
}

void attention_forward(float* out, float* att, float* scratch, const float* qkv, int B, int T, int NH, int NKV,
                       int HD, int lookahead, bool probs_bf16) {
    int QKV = (NH + 2 * NKV) * HD;
    int CA = NH * HD;
    int group = NH / NKV;
    float scale = 1.0f / std::sqrt((float)HD);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* base = qkv + (long)b * T * QKV;
            const float* q = base + h * HD;
            const float* k = base + (NH + h / group) * HD;
            const float* v = base + (NH + NKV + h / group) * HD;
            float* P = att ? att + ((long)b * NH + h) * T * T
                           : scratch + omp_get_thread_num() * AttentionScratch::floats(T);
            attention_probs(P, q, k, T, HD, QKV, scale, lookahead, probs_bf16);
            causal_matmul(out + (long)b * T * CA + h * HD, CA, P, v, QKV, T, HD, 0.0f, lookahead);
        }
    }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int NKV, int HD, int lookahead, bool probs_bf16) {
    int QKV = (NH + 2 * NKV) * HD;
    int CA = NH * HD;
    int group = NH / NKV;
    float scale = 1.0f / std::sqrt((float)HD);
    // One task per (batch, kv head): the query heads of a group all add into the
    // same dk and dv, so they run in order on one thread.
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            float* thread_scratch = scratch + omp_get_thread_num() * AttentionScratch::floats(T);
            float* dP = thread_scratch + (long)T * T;
            const float* base = qkv + (long)b * T * QKV;
            float* dbase = dqkv + (long)b * T * QKV;
            const float* k = base + (NH + g) * HD;
            const float* v = base + (NH + NKV + g) * HD;
            float* dk = dbase + (NH + g) * HD;
            float* dv = dbase + (NH + NKV + g) * HD;
            for (int i = 0; i < T; i++) {
                std::memset(dk + (long)i * QKV, 0, sizeof(float) * HD);
                std::memset(dv + (long)i * QKV, 0, sizeof(float) * HD);
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                const float* q = base + h * HD;
                float* dq = dbase + h * HD;
                const float* dO = dout + (long)b * T * CA + h * HD;
                const float* P;
                if (att) {
                    P = att + ((long)b * NH + h) * T * T;
                } else {
                    attention_probs(thread_scratch, q, k, T, HD, QKV, scale, lookahead, probs_bf16);
                    P = thread_scratch;
                }
                // dP = dO V^T on the visible keys only.
                for (int r0 = 0; r0 < T; r0 += kAttBlock) {
                    int r1 = r0 + kAttBlock < T ? r0 + kAttBlock : T;
                    sgemm(false, true, r1 - r0, visible_keys(r1, T, lookahead), HD, 1.0f, dO + (long)r0 * CA, CA, v,
                          QKV, 0.0f, dP + (long)r0 * T, T);
                }
                causal_matmul_transposed(dv, QKV, P, dO, CA, T, HD, lookahead);  // dV += P^T dO
                // dS = P * (dP - rowsum(P * dP)), written over dP; zero past the visible keys.
                for (int i = 0; i < T; i++) {
                    const float* p = P + (long)i * T;
                    float* d = dP + (long)i * T;
                    const int last = i + lookahead < T ? i + lookahead : T - 1;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int j = 0; j <= last; j++) dot += p[j] * d[j];
                    for (int j = 0; j <= last; j++) d[j] = p[j] * (d[j] - dot) * scale;
                    for (int j = last + 1; j < T; j++) d[j] = 0.0f;
                }
                // dQ = dS K ; dK += dS^T Q (dS already carries the score scale).
                causal_matmul(dq, QKV, dP, k, QKV, T, HD, 0.0f, lookahead);
                causal_matmul_transposed(dk, QKV, dP, q, QKV, T, HD, lookahead);
            }
        }
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

void swiglu_backward(float* dgate_up, const float* dout, const float* gate_up, int N, int H) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* g = gate_up + (long)n * 2 * H;
        const float* u = g + H;
        const float* dy = dout + (long)n * H;
        float* dg = dgate_up + (long)n * 2 * H;
        float* du = dg + H;
        for (int i = 0; i < H; i++) {
            float s = sigmoid(g[i]);
            float silu = g[i] * s;
            dg[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
            du[i] = dy[i] * silu;
        }
    }
}

void residual_forward(float* out, const float* a, const float* b, long n) {
#pragma omp parallel for
    for (long i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void crossentropy_forward(float* logits, float* losses, const int32_t* targets, int N, int V) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) maxv = row[v] > maxv ? row[v] : maxv;
        float target_logit = row[targets[n]];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) {
            row[v] = vexp(row[v] - maxv);
            sum += row[v];
        }
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) row[v] *= inv;
        losses[n] = std::log(sum) + maxv - target_logit;
    }
}

void crossentropy_backward(float* logits, const int32_t* targets, float dloss, int N, int V) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        for (int v = 0; v < V; v++) row[v] *= dloss;
        row[targets[n]] -= dloss;
    }
}

}  // namespace hlat
