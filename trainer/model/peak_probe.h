// The arithmetic ceilings of this CPU, measured: fp32 fused multiply-adds and
// bf16 dot products (vdpbf16ps) from registers, no memory traffic, on every
// thread at once. Every GEMM rate hlat reports has these beside it: a matmul
// at 70% of the bf16 probe is near the hardware; one at 30% is not.
#pragma once

namespace hlat {

// GFLOP/s of 512-bit fp32 FMAs (2 flops per lane) on `threads` threads; 0
// when the CPU lacks AVX-512.
double fp32_fma_peak_gflops(int threads);

// GFLOP/s of 512-bit bf16 dot products (vdpbf16ps: 32 products summed
// pairwise into 16 fp32 lanes, 64 flops) on `threads` threads; 0 when the
// CPU lacks avx512_bf16.
double bf16_dot_peak_gflops(int threads);

}  // namespace hlat
