// The one fp32 GEMM every kernel calls: C (M, N) = alpha op(A) op(B) + beta C,
// row-major, op(X) = X or X^T.
//
// It is oneDNN's sgemm, which picks its kernels by runtime CPU detection.
// OpenBLAS 0.3.21 (Debian 12) does not know recent Xeons (family 6, model
// 207) and falls back to its SSE3 "Prescott" kernels there: 36-51 GFLOP/s on
// 2 cores against oneDNN's 250-310 on the same machine. Called inside an
// OpenMP parallel region it runs on the calling thread only.
#pragma once

#include "trainer/model/bf16.h"

namespace hlat {

// Silent data corruption, injected (`--inject sdc`): while on, every sgemm
// and gemm_bf16 of this process flips one mantissa bit of its first output,
// as a core with bad arithmetic corrupts results without crashing.
void set_gemm_bit_flip(bool on);
void flip_bit_if_injected(float* C);
// The same bit of a bf16 output (fp32's bit 22 is bf16's bit 6).
void flip_bit_if_injected(bf16* C);

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc);

}  // namespace hlat
