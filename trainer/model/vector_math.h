// exp that the compiler can vectorize. glibc's expf only has vector variants
// under -ffast-math, and fast-math would let the compiler assume no NaN or Inf,
// which are exactly the values a stability tool must see. This is the Cephes
// expf (range reduction by ln 2, degree-6 polynomial), within 2 ulp of expf,
// written as straight-line code so loops calling it vectorize.
#pragma once

// A function whose loops run 512 bits wide where the CPU has AVX-512. GCC 12's
// -march=native prefers 256-bit vectors there, and the elementwise passes
// around the products (SwiGLU, RoPE, RMSNorm backward, cross-entropy) are
// bound by their arithmetic (vexp, the rounding to bf16), not by memory.
// Each lane does the same operations at any width: the values are the same
// bits. A sum's order depends on its width, so a reduction in such a function
// keeps the 8 lanes it had (safelen(8)). No effect on AVX2-only CPUs.
// Config M, bf16, a Xeon with AMX, ms a step: SwiGLU backward 18.7-18.9 ->
// 13.7-13.9, forward 12.1-12.2 -> 9.9, RMSNorm backward 19.4-19.6 -> 18.1,
// RoPE 12.0-12.2 -> 10.3-10.9, cross-entropy 13.8-13.9 -> 12.2-12.3.
#define HLAT_WIDE_VECTORS [[gnu::target("prefer-vector-width=512")]]

#include <bit>
#include <cmath>
#include <cstdint>

namespace hlat {

inline float vexp(float x) {
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    // Comparisons are false for NaN, so NaN passes through to the result.
    float xc = x > 88.3762626647949f ? 88.3762626647949f : x;
    xc = xc < -87.3365478515625f ? -87.3365478515625f : xc;
    float k = std::nearbyint(xc * log2e);
    float r = xc - k * ln2_hi - k * ln2_lo;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    float scale = std::bit_cast<float>(((int32_t)k + 127) << 23);
    float y = p * scale;
    y = x < -87.3365478515625f ? 0.0f : y;  // exp(-inf) = 0, and below FLT_MIN
    return x > 88.7228391116729996f ? INFINITY : y;
}

}  // namespace hlat
