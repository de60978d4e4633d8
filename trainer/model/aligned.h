// Buffers the kernels stream through, starting on a cache line.
//
// glibc's malloc hands out a large block 16 bytes past a page boundary, so
// every 64-byte vector load, store or AMX tile row in a std::vector's data
// spans two cache lines. oneDNN's bf16 matmul on AMX feels it most: config M's
// gate_up product (2048 x 512 x 2752, 2 threads, oneDNN 2.6, a Xeon with AMX)
// takes 6.6 ms on such buffers and 2.0 ms on the same buffers 64-byte aligned.
#pragma once

#include <boost/align/aligned_allocator.hpp>

#include <cstddef>
#include <vector>

namespace hlat {

constexpr std::size_t kCacheLineBytes = 64;

template <class T>
using AlignedVector = std::vector<T, boost::alignment::aligned_allocator<T, kCacheLineBytes>>;

}  // namespace hlat
