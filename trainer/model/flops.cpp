#include "trainer/model/flops.h"

#include "trainer/model/kernels_bf16.h"
#include "trainer/model/sgemm.h"

#include <chrono>
#include <vector>

namespace hlat {

namespace {

// The model's linear layers: each weight is (out, in), `count` of them.
struct Linear {
    const char* name;
    int in, out, count;
};

std::vector<Linear> linears(const ModelConfig& m) {
    const int C = m.dim, CA = m.n_heads * m.head_dim();
    return {{"qkv", C, m.qkv_dim(), m.n_layers},
            {"o", CA, C, m.n_layers},
            {"gate_up", C, 2 * m.hidden_dim, m.n_layers},
            {"down", m.hidden_dim, C, m.n_layers},
            {"head", C, m.vocab_size, 1}};
}

}  // namespace

long matmul_parameters(const ModelConfig& m) {
    long n = 0;
    for (const Linear& l : linears(m)) n += (long)l.in * l.out * l.count;
    return n;
}

double flops_per_token(const ModelConfig& m, int T) {
    return 6.0 * matmul_parameters(m) + 12.0 * m.n_layers * m.dim * T;
}

std::vector<GemmShape> training_gemms(const ModelConfig& m, int tokens) {
    std::vector<GemmShape> out;
    for (const Linear& l : linears(m)) {
        // out = inp @ W^T; dinp = dout @ W; dW = dout^T @ inp (kernels.h: a step's first
        // micro-batch writes dW over, later ones add to it).
        out.push_back({l.name, "forward", tokens, l.out, l.in, false, true, false, l.count});
        out.push_back({l.name, "dinput", tokens, l.in, l.out, false, false, false, l.count});
        out.push_back({l.name, "dweight", l.out, l.in, tokens, true, false, false, l.count});
    }
    return out;
}

double measure_peak_gflops(bool bf16_matmuls) {
    const int n = 2048;  // large enough that the rate is the kernels', not the call overhead's
    const long nn = (long)n * n;
    std::vector<float> a(bf16_matmuls ? 0 : nn, 0.5f), b(bf16_matmuls ? 0 : nn, 0.25f), c(nn, 0.0f);
    std::vector<bf16> a16(bf16_matmuls ? nn : 0, float_to_bf16_rne(0.5f)), b16(bf16_matmuls ? nn : 0, float_to_bf16_rne(0.25f));
    double best = 0.0;
    for (int rep = 0; rep < 6; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        if (bf16_matmuls)
            gemm_bf16(c.data(), a16.data(), b16.data(), n, n, n, false, false, false);
        else
            sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double gflops = 2.0 * n * n * n / s / 1e9;
        if (rep > 0 && gflops > best) best = gflops;  // the first call pays for thread start-up
    }
    return best;
}

}  // namespace hlat
