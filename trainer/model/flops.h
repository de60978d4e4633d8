// Model FLOPs and the machine's peak, for MFU.
#pragma once

#include "trainer/config/model_config.h"

#include <string>
#include <vector>

namespace hlat {

// Parameters that take part in matmuls: everything but the input embedding
// (a lookup) and the norm weights (elementwise).
long matmul_parameters(const ModelConfig& m);

// Training FLOPs per token at sequence length T: 6N for the matmuls' forward
// and backward, plus 12 * L * C * T for the attention scores and their use
// (the PaLM appendix B formula, N as above).
double flops_per_token(const ModelConfig& m, int T);

// Best rate of a few square matmuls, with the current thread count, in
// GFLOP/s: sgemm, or with bf16_matmuls the bf16 matmul engine the bf16
// precision modes run on (so their MFU is against their own peak). Takes
// about half a second.
double measure_peak_gflops(bool bf16_matmuls = false);

// One GEMM of a training step: C (m, n) = op(A) (m, k) @ op(B) (k, n).
struct GemmShape {
    std::string matmul;  // qkv, o, gate_up, down, head
    std::string pass;    // forward, dinput, dweight
    int m, n, k;
    bool trans_a, trans_b, accumulate;
    int count;           // how many a step runs (once per layer)
};

// The GEMMs of the linear layers in a step over `tokens` tokens, forward and
// backward, with the operand layouts the model uses (kernels.h).
std::vector<GemmShape> training_gemms(const ModelConfig& m, int tokens);

}  // namespace hlat
