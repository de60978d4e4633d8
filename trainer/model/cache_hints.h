#pragma once
// Hints to the cache for the memory-bound passes.
//  - prefetch_span: for loops that do enough arithmetic a coordinate that few
//    iterations are in flight at once; without it they run at the latency of
//    their loads from memory, not its bandwidth.
//  - stream_copy: for an output written once and read much later (attention's
//    stored probabilities, the packed bf16 weights): its whole cache lines
//    stored past the cache, without first reading the lines they overwrite.

#include "trainer/model/aligned.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

namespace hlat {

// Asks for the cache lines holding the bytes [p, p + bytes) ahead of their
// use (kWrite: to be written). Inlined by force: as a function of its own,
// GCC 12 finds a loop of prefetches free of side effects and drops the calls
// to it.
template <bool kWrite = false>
[[gnu::always_inline]] inline void prefetch_span(const void* p, long bytes) {
    const std::uintptr_t line = kCacheLineBytes;
    const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(p) / line * line;
    const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + (std::uintptr_t)bytes;
    for (std::uintptr_t a = first; a < end; a += line) __builtin_prefetch(reinterpret_cast<const void*>(a), kWrite);
}

// dst[0, n) = src[0, n), the aligned whole vectors of dst with non-temporal
// stores, the unaligned head and tail with plain ones (all plain where the
// build targets neither AVX-512 nor AVX). Bits are moved, never converted.
// Call stream_fence() before another thread reads dst.
template <typename T>
inline void stream_copy(T* dst, const T* src, long n) {
    static_assert(std::is_trivially_copyable_v<T>);
    char* d = reinterpret_cast<char*>(dst);
    const char* s = reinterpret_cast<const char*>(src);
    const long bytes = n * (long)sizeof(T);
    long i = 0;
#if defined(__AVX512F__) || defined(__AVX__)
#if defined(__AVX512F__)
    constexpr long kVector = 64;
#else
    constexpr long kVector = 32;
#endif
    i = std::min(bytes, (long)((kVector - reinterpret_cast<std::uintptr_t>(d) % kVector) % kVector));
    std::memcpy(d, s, i);
    for (; i + kVector <= bytes; i += kVector) {
#if defined(__AVX512F__)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
#else
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), v);
#endif
    }
#endif
    std::memcpy(d + i, s + i, bytes - i);
}

// Orders the non-temporal stores before every later store: they are weakly
// ordered, so without it a thread released by a barrier might read old values.
inline void stream_fence() { _mm_sfence(); }

}  // namespace hlat
