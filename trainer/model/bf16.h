// BF16 numerics: round-to-nearest-even and stochastic rounding from fp32,
// widening back to fp32, and the counter-based random bits stochastic
// rounding draws from. Groundwork of the BF16 training modes (issue 7).
//
// A bf16 value is the top 16 bits of an fp32: sign, 8 exponent bits, 7
// mantissa bits. Narrowing drops the low 16 bits; how it rounds is the point.
#pragma once

#include <bit>
#include <cstdint>

namespace hlat {

using bf16 = uint16_t;

inline float bf16_to_float(bf16 h) { return std::bit_cast<float>((uint32_t)h << 16); }

// Round to nearest, ties to even: add 0x7fff plus the lowest kept bit, then
// truncate. Carries ripple into the exponent, so the largest finite values
// round to Inf as IEEE says; Inf stays Inf; NaN stays a (quiet) NaN.
// Written without a branch so that loops over it vectorize.
inline bf16 float_to_bf16_rne(float f) {
    uint32_t bits = std::bit_cast<uint32_t>(f);
    uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (bits >> 16) | 0x0040u;  // NaN: keep sign, set quiet bit
    return (bf16)((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// The bf16 value nearest x, kept in fp32.
inline float bf16_value(float x) { return bf16_to_float(float_to_bf16_rne(x)); }

// Stochastic rounding: round up with probability (dropped bits) / 2^16, so
// the expected value of the result is the input. `random` supplies the 16
// bits. Inf and NaN pass unchanged; a value may round up to Inf only from the
// largest finite bf16 range, as with any rounding.
inline bf16 float_to_bf16_stochastic(float f, uint32_t random) {
    uint32_t bits = std::bit_cast<uint32_t>(f);
    uint32_t rounded = (bits + (random & 0xffffu)) >> 16;
    return (bits & 0x7f800000u) == 0x7f800000u ? float_to_bf16_rne(f) : (bf16)rounded;
}

// Counter-based random bits: a pure function of (seed, step, tensor,
// element), so a run rounds the same way every time, replicas holding the
// same tensor round identically, and a resumed run rounds exactly as the
// uninterrupted one. SplitMix64's finalizer over the mixed key: each output
// bit depends on every key bit.
inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

// The key of one (seed, step, tensor): computed once per tensor, then mixed
// with each element's index.
inline uint64_t rounding_key(uint64_t seed, uint64_t step, uint32_t tensor) {
    uint64_t key = mix64(seed ^ 0x9e3779b97f4a7c15ull);
    key = mix64(key ^ step);
    return mix64(key ^ ((uint64_t)tensor << 40));
}

inline uint32_t rounding_bits_at(uint64_t key, uint64_t element) { return (uint32_t)mix64(key ^ element); }

inline uint32_t rounding_bits(uint64_t seed, uint64_t step, uint32_t tensor, uint64_t element) {
    return rounding_bits_at(rounding_key(seed, step, tensor), element);
}

}  // namespace hlat
