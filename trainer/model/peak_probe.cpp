#include "trainer/model/peak_probe.h"

#include "trainer/model/amx_tiles.h"

// GCC 12 warns on the AVX-512 intrinsics' own undefined pass-through
// operands (GCC bug 105593, fixed in GCC 13), as in amx_tiles.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace hlat {
namespace {

// Enough independent accumulators to cover the FMA latency on every port
// (4 cycles x 2 ports on Zen 4 and Ice Lake alike, with room to spare).
constexpr int kChains = 12;
constexpr long kIterations = 200'000;  // about 0.4 ms a trial on an AVX2 core: short enough that some trial sees an idle core

__attribute__((target("avx512f"))) float fma_loop(long iterations) {
    __m512 acc[kChains];
    for (int i = 0; i < kChains; i++) acc[i] = _mm512_set1_ps(0.001f * i);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < kChains; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 sum = acc[0];
    for (int i = 1; i < kChains; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);  // the result is used, so the loop stays
}

// The same on 256-bit registers, for CPUs without AVX-512 (Zen 3, Haswell
// to Comet Lake): two FMA ports there too.
__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iterations) {
    __m256 acc[kChains];
    for (int i = 0; i < kChains; i++) acc[i] = _mm256_set1_ps(0.001f * i);
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-4f);
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < kChains; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 sum = acc[0];
    for (int i = 1; i < kChains; i++) sum = _mm256_add_ps(sum, acc[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[7];
}

__attribute__((target("avx512f,avx512bf16"))) float dot_loop(long iterations) {
    __m512 acc[kChains];
    for (int i = 0; i < kChains; i++) acc[i] = _mm512_set1_ps(0.001f * i);
    const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.25f));
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
    for (long it = 0; it < iterations; it++)
        for (int i = 0; i < kChains; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 sum = acc[0];
    for (int i = 1; i < kChains; i++) sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

// AMX's tile multiply (tdpbf16ps): a 16 x 32 bf16 tile times a 32 x 16 one
// into a 16 x 16 fp32 tile, 16,384 flops an instruction. Four accumulators
// (C_ij += A_i B_j over two A and two B tiles) cover the instruction's latency,
// as oneDNN's brgemm kernels block it; the operands stay in tiles, so this is
// the multiplier's rate, not memory's.
__attribute__((target("amx-tile,amx-bf16"))) float amx_loop(long iterations) {
    configure_amx_tiles();
    alignas(64) uint16_t operand[16 * 32];
    for (int i = 0; i < 16 * 32; i++) operand[i] = 0x3c00 + (i & 7);  // small bf16 values: nothing overflows
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, operand, 64);
    _tile_loadd(5, operand, 64);
    _tile_loadd(6, operand, 64);
    _tile_loadd(7, operand, 64);
    for (long it = 0; it < iterations; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    alignas(64) float out[16 * 16];
    _tile_stored(0, out, 64);
    release_amx_tiles();
    return out[0];
}

// Runs `loop` on every thread at once, in GFLOP/s: the best of at least
// kMinTrials trials spread over at least kMinSeconds. A ceiling is a best
// case; on a shared VM ten trials (a few milliseconds) once measured half
// the FMA rate (one vCPU descheduled throughout) while the same run's GEMMs
// went faster than that "ceiling".
constexpr int kMinTrials = 10;
constexpr double kMinSeconds = 0.5;

double rate(float (*loop)(long), double flops_per_instruction, int threads, long iterations = kIterations,
            int chains = kChains) {
    double best = 0.0;
    volatile float sink = 0.0f;
    const auto start = std::chrono::steady_clock::now();
    for (int trial = 0;; trial++) {
        auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
        {
            float r = loop(iterations);
#pragma omp critical
            sink = sink + r;
        }
        const auto t1 = std::chrono::steady_clock::now();
        double gflops = flops_per_instruction * chains * iterations * threads /
                        std::chrono::duration<double>(t1 - t0).count() / 1e9;
        if (gflops > best) best = gflops;
        if (trial + 1 >= kMinTrials && std::chrono::duration<double>(t1 - start).count() >= kMinSeconds) break;
    }
    return best;
}

}  // namespace

double fp32_fma_peak_gflops(int threads) {
    if (__builtin_cpu_supports("avx512f")) return rate(fma_loop, 2.0 * 16, threads);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return rate(fma_loop_avx2, 2.0 * 8, threads);
    return 0.0;
}

double bf16_dot_peak_gflops(int threads) {
    if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
    return rate(dot_loop, 2.0 * 32, threads);
}

double amx_bf16_peak_gflops(int threads) {
    if (!amx_tiles_usable()) return 0.0;
    // 16 cycles an instruction: a twentieth of the iterations takes about as long as dot_loop's.
    return rate(amx_loop, 2.0 * 16 * 16 * 32, threads, kIterations / 20, 4);
}

// b = a over two arrays of `bytes` each on every thread (static split, so
// each thread touches the pages it first wrote), best of `reps`: read plus
// written bytes per second, as STREAM's copy counts them.
double copy_bandwidth_gbs(long bytes, int threads) {
    const long n = bytes / (long)sizeof(float);
    std::vector<float> a(n), b(n);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < n; i++) {
        a[i] = (float)(i & 1023);
        b[i] = 0.0f;
    }
    const int reps = bytes > (64L << 20) ? 5 : 50;
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
        for (long i = 0; i < n; i++) b[i] = a[i];
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        std::swap(a, b);
    }
    return 2.0 * (double)n * sizeof(float) / best / 1e9;
}

MemoryCeilings memory_ceilings(int threads) {
    return {copy_bandwidth_gbs(256L << 20, threads), copy_bandwidth_gbs(2L << 20, threads)};
}

}  // namespace hlat
