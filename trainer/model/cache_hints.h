#pragma once
// Hints to the cache for the memory-bound passes.
//  - prefetch_span: for loops that do enough arithmetic a coordinate that few
//    iterations are in flight at once; without it they run at the latency of
//    their loads from memory, not its bandwidth.
//  - stream_copy: for an output written once and read much later (attention's
//    stored probabilities): its whole cache lines stored past the cache,
//    without first reading the lines they overwrite.

#include "trainer/model/aligned.h"

#include <cstdint>

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
// build targets neither AVX-512 nor AVX; its one caller today runs only on
// CPUs with AVX-512). Call stream_fence() before another thread reads dst.
inline void stream_copy(float* dst, const float* src, long n) {
    long i = 0;
#if defined(__AVX512F__)
    for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63); i++) dst[i] = src[i];
    for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif defined(__AVX__)
    for (; i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 31); i++) dst[i] = src[i];
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
#endif
    for (; i < n; i++) dst[i] = src[i];
}

// Orders the non-temporal stores before every later store: they are weakly
// ordered, so without it a thread released by a barrier might read old values.
inline void stream_fence() { _mm_sfence(); }

}  // namespace hlat
