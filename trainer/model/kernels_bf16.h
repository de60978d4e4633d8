// BF16 kernels: narrowing and widening arrays, and matmuls with bf16 inputs and
// fp32 accumulation, which every bf16 precision mode computes with.
//
// Letters as in kernels.h. The matmul engine is chosen once at runtime: on a
// CPU with avx512_bf16, oneDNN's bf16 kernels; elsewhere the bf16 inputs are
// widened to fp32 and go through sgemm. The product of two bf16 values is
// exact in fp32, so both engines compute the same products and differ only in
// the order of the fp32 sums.
#pragma once

#include "trainer/model/bf16.h"

#include <string>

namespace hlat {

enum class Bf16MatmulEngine { OneDnn, Emulated };

// The engine in use: OneDnn when the CPU has avx512_bf16, unless the
// environment variable HLAT_BF16_MATMUL=emulated asks for the fallback; any
// other value of it throws, naming it.
Bf16MatmulEngine bf16_matmul_engine();
void set_bf16_matmul_engine(Bf16MatmulEngine engine);  // tests and benchmarks
std::string bf16_matmul_engine_name();

// out[i] = bf16(in[i]), round-to-nearest-even.
void bf16_narrow(bf16* out, const float* in, long n);
// x[i] = float(bf16(x[i])): the value a bf16 tensor would hold, kept in fp32.
void bf16_round_inplace(float* x, long n);

// C (M, N) = op(A) @ op(B) + (accumulate ? C : 0), row-major; op(X) is X or X^T.
// A and B are bf16, C fp32; sums in fp32.
void gemm_bf16(float* C, const bf16* A, const bf16* B, int M, int N, int K, bool trans_a, bool trans_b,
               bool accumulate);

// The linear layers. Their outputs and input gradients are bf16 tensors, left
// here as the fp32 sums: whoever reads them first rounds them, in the same
// pass as its own work (the _bf16 kernels of kernels.h), or with
// bf16_round_inplace where no kernel can.
// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T.
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, int N, int IC, int OC);
// dinp (N, IC) = dout @ weight (overwritten); dweight (OC, IC) += dout^T @ inp,
// the sum kept in fp32; inp is the forward's input.
void matmul_backward_bf16(float* dinp, float* dweight, const bf16* dout, const bf16* inp, const bf16* weight,
                          int N, int IC, int OC);

}  // namespace hlat
