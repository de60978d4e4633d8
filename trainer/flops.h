// Model FLOPs and the machine's peak, for MFU.
#pragma once

#include "trainer/config.h"

namespace hlat {

// Parameters that take part in matmuls: everything but the input embedding
// (a lookup) and the norm weights (elementwise).
long matmul_parameters(const ModelConfig& m);

// Training FLOPs per token at sequence length T: 6N for the matmuls' forward
// and backward, plus 12 * L * C * T for the attention scores and their use
// (the PaLM appendix B formula, N as above).
double flops_per_token(const ModelConfig& m, int T);

// Best sgemm rate of a few square products, with the current thread count,
// in GFLOP/s. Takes well under a second.
double measure_sgemm_peak_gflops();

}  // namespace hlat
