#include "trainer/model/vocab_parallel.h"

#include "trainer/model/vector_math.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace hlat {

static bool held(int32_t token, int vocab_start, int V) { return token >= vocab_start && token < vocab_start + V; }

void vocab_parallel_embedding_forward(float* out, const int32_t* tokens, const float* embed, int N, int C,
                                      int vocab_start, int V) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = out + (long)n * C;
        if (held(tokens[n], vocab_start, V)) {
            std::memcpy(row, embed + (long)(tokens[n] - vocab_start) * C, sizeof(float) * C);
        } else {
            std::memset(row, 0, sizeof(float) * C);
        }
    }
}

void vocab_parallel_embedding_backward(float* dembed, const float* dout, const int32_t* tokens, int N, int C,
                                       int vocab_start, int V) {
    for (int n = 0; n < N; n++) {
        if (!held(tokens[n], vocab_start, V)) continue;
        float* row = dembed + (long)(tokens[n] - vocab_start) * C;
        const float* d = dout + (long)n * C;
        for (int c = 0; c < C; c++) row[c] += d[c];
    }
}

void vocab_parallel_crossentropy_forward(float* logits, float* losses, float* logz, const int32_t* targets, int N,
                                         int V, int vocab_start, TensorParallelGroup& group, float* row_max) {
    std::vector<float> maxv(N), sums(2 * (long)N);  // sums: N sums of exponentials, then N target logits
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float* row = logits + (long)n * V;
        float m = -INFINITY;
        for (int v = 0; v < V; v++) m = row[v] > m ? row[v] : m;
        maxv[n] = m;
    }
    group.allreduce_max(maxv.data(), N);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        // The target's logit relative to the global maximum; zero on ranks
        // that do not hold it, so the sum over ranks is the one value.
        sums[N + n] = held(targets[n], vocab_start, V) ? row[targets[n] - vocab_start] - maxv[n] : 0.0f;
        float s = 0.0f;
        for (int v = 0; v < V; v++) {
            row[v] = vexp(row[v] - maxv[n]);
            s += row[v];
        }
        sums[n] = s;
    }
    group.allreduce_sum(sums.data(), 2 * (long)N);
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        float inv = 1.0f / sums[n];
        for (int v = 0; v < V; v++) row[v] *= inv;
        losses[n] = std::log(sums[n]) - sums[N + n];
        if (logz) logz[n] = std::log(sums[n]) + maxv[n];
        if (row_max) row_max[n] = maxv[n];
    }
}

void vocab_parallel_crossentropy_backward(float* logits, const int32_t* targets, const float* logz, float z_loss,
                                          float dloss, int N, int V, int vocab_start) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float* row = logits + (long)n * V;
        // The z-loss's share, 2 z_loss log Z p, as crossentropy_backward adds it.
        const float scale = z_loss > 0.0f ? dloss * (1.0f + 2.0f * z_loss * logz[n]) : dloss;
        for (int v = 0; v < V; v++) row[v] *= scale;
        if (held(targets[n], vocab_start, V)) row[targets[n] - vocab_start] -= dloss;
    }
}

}  // namespace hlat
