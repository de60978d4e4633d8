// The arithmetic ceilings of this CPU, measured: fp32 fused multiply-adds and
// bf16 dot products (vdpbf16ps) and AMX's tile multiply from registers, no memory traffic, on every
// thread at once. Every GEMM rate hlat reports has these beside it: a matmul
// at 70% of the bf16 probe is near the hardware; one at 30% is not.
#pragma once

namespace hlat {

// GFLOP/s of fp32 FMAs (2 flops per lane) on `threads` threads: 512-bit ones
// where the CPU has AVX-512, else 256-bit (AVX2); 0 without either.
double fp32_fma_peak_gflops(int threads);

// GFLOP/s of 512-bit bf16 dot products (vdpbf16ps: 32 products summed
// pairwise into 16 fp32 lanes, 64 flops) on `threads` threads; 0 when the
// CPU lacks avx512_bf16.
double bf16_dot_peak_gflops(int threads);

// GFLOP/s of AMX's bf16 tile multiply (tdpbf16ps: 16 x 32 by 32 x 16 into
// fp32, 16,384 flops) on `threads` threads; 0 when the CPU lacks amx_bf16 or
// the kernel will not hand this process the tile state. oneDNN's bf16 matmul
// runs on AMX where it can (Sapphire Rapids and later), so that, not the
// dot product, is its ceiling there.
double amx_bf16_peak_gflops(int threads);

// What memory-bound kernels can reach: a copy's read plus written bytes per
// second on every thread, out of memory (two 256 MiB arrays) and out of cache
// (two 2 MiB arrays: the size of one (2048, 256) fp32 activation, which the
// L2 and L3 hold between two kernels that read it).
struct MemoryCeilings {
    double memory_gbs = 0.0;
    double cache_gbs = 0.0;
};
MemoryCeilings memory_ceilings(int threads);

}  // namespace hlat
