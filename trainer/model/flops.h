// Model FLOPs and the machine's peak, for MFU.
#pragma once

#include "trainer/config/model_config.h"

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

}  // namespace hlat
