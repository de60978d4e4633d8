#include "trainer/model/kernels_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hlat::reference {

void matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double sum = 0.0;
            for (int i = 0; i < IC; i++) sum += (double)inp[n * IC + i] * weight[o * IC + i];
            out[n * OC + o] = (float)sum;
        }
}

void matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < IC; i++) {
            double sum = 0.0;
            for (int o = 0; o < OC; o++) sum += (double)dout[n * OC + o] * weight[o * IC + i];
            dinp[n * IC + i] = (float)sum;
        }
    for (int o = 0; o < OC; o++)
        for (int i = 0; i < IC; i++) {
            double sum = 0.0;
            for (int n = 0; n < N; n++) sum += (double)dout[n * OC + o] * inp[n * IC + i];
            dweight[o * IC + i] += (float)sum;
        }
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                       int HD) {
    const int QKV = (NH + 2 * NKV) * HD, CA = NH * HD, group = NH / NKV;
    const double scale = 1.0 / std::sqrt((double)HD);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / group;
            float* P = att + ((long)b * NH + h) * T * T;
            for (int i = 0; i < T; i++) {
                const float* q = qkv + ((long)b * T + i) * QKV + h * HD;
                std::vector<double> s(i + 1);
                double maxv = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float* k = qkv + ((long)b * T + j) * QKV + (NH + g) * HD;
                    double dot = 0.0;
                    for (int d = 0; d < HD; d++) dot += (double)q[d] * k[d];
                    s[j] = dot * scale;
                    maxv = std::max(maxv, s[j]);
                }
                double sum = 0.0;
                for (int j = 0; j <= i; j++) sum += std::exp(s[j] - maxv);
                for (int j = 0; j < T; j++) P[i * T + j] = j <= i ? (float)(std::exp(s[j] - maxv) / sum) : 0.0f;
                float* o = out + ((long)b * T + i) * CA + h * HD;
                for (int d = 0; d < HD; d++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += (double)P[i * T + j] * qkv[((long)b * T + j) * QKV + (NH + NKV + g) * HD + d];
                    o[d] = (float)acc;
                }
            }
        }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B,
                        int T, int NH, int NKV, int HD) {
    const int QKV = (NH + 2 * NKV) * HD, CA = NH * HD, group = NH / NKV;
    const double scale = 1.0 / std::sqrt((double)HD);
    for (long i = 0; i < (long)B * T * QKV; i++) dqkv[i] = 0.0f;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int g = h / group;
            const float* P = att + ((long)b * NH + h) * T * T;
            auto q = [&](int t) { return qkv + ((long)b * T + t) * QKV + h * HD; };
            auto k = [&](int t) { return qkv + ((long)b * T + t) * QKV + (NH + g) * HD; };
            auto v = [&](int t) { return qkv + ((long)b * T + t) * QKV + (NH + NKV + g) * HD; };
            auto dq = [&](int t) { return dqkv + ((long)b * T + t) * QKV + h * HD; };
            auto dk = [&](int t) { return dqkv + ((long)b * T + t) * QKV + (NH + g) * HD; };
            auto dv = [&](int t) { return dqkv + ((long)b * T + t) * QKV + (NH + NKV + g) * HD; };
            for (int i = 0; i < T; i++) {
                const float* dO = dout + ((long)b * T + i) * CA + h * HD;
                std::vector<double> dP(i + 1);
                double dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    double acc = 0.0;
                    for (int d = 0; d < HD; d++) acc += (double)dO[d] * v(j)[d];
                    dP[j] = acc;
                    dot += acc * P[i * T + j];
                    for (int d = 0; d < HD; d++) dv(j)[d] += (float)(P[i * T + j] * dO[d]);
                }
                for (int j = 0; j <= i; j++) {
                    double ds = P[i * T + j] * (dP[j] - dot) * scale;
                    for (int d = 0; d < HD; d++) {
                        dq(i)[d] += (float)(ds * k(j)[d]);
                        dk(j)[d] += (float)(ds * q(i)[d]);
                    }
                }
            }
        }
}

}  // namespace hlat::reference
