#pragma once
// Software prefetch for the memory-bound passes whose loops do enough
// arithmetic a coordinate that few iterations are in flight at once: without
// it they run at the latency of their loads from memory, not its bandwidth.

namespace hlat {

constexpr long kCacheLine = 64;

// Asks for the bytes [p, p + bytes) ahead of their use (kWrite: to be
// written). Inlined by force: as a function of its own, GCC 12 finds a loop
// of prefetches free of side effects and drops the calls to it.
template <bool kWrite = false>
[[gnu::always_inline]] inline void prefetch_span(const void* p, long bytes) {
    const char* c = static_cast<const char*>(p);
    for (long i = 0; i < bytes; i += kCacheLine) __builtin_prefetch(c + i, kWrite);
}

}  // namespace hlat
