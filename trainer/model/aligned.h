// Buffers the kernels stream through, starting on a cache line, and the large
// ones on a huge page.
//
// glibc's malloc hands out a large block 16 bytes past a page boundary, so
// every 64-byte vector load, store or AMX tile row in a std::vector's data
// spans two cache lines. oneDNN's bf16 matmul on AMX feels it most: config M's
// gate_up product (2048 x 512 x 2752, 2 threads, oneDNN 2.6, a Xeon with AMX)
// takes 6.6 ms on such buffers and 2.0 ms on the same buffers 64-byte aligned.
//
// A buffer of 2 MiB or more starts on a 2 MiB boundary and asks the kernel to
// back it with transparent huge pages (madvise), which Debian's kernels grant
// only to those who ask. A 4 KiB page maps 16 rows of a 256-byte-strided AMX
// tile; in a virtual machine each TLB miss walks two page tables. Config M's
// bf16 step on a KVM Xeon with AMX (hlat profile, three runs each, taken in
// turns): 661 -> 630 ms, attention 150 -> 128 ms, the same bits. Where the
// kernel's THP setting is "never" the hint does nothing and the buffer is an
// ordinary one.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

namespace hlat {

constexpr std::size_t kCacheLineBytes = 64;
constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;

// `bytes` of memory on a cache line, or on a huge page with the hint given
// when it is at least one; throws std::bad_alloc. Freed with std::free.
void* allocate_buffer(std::size_t bytes);

// The kernel's transparent huge page setting, the word in brackets in `path`
// ("always", "madvise" or "never"), or "unknown" where the file cannot be
// read (a kernel without THP, or no /sys): whether allocate_buffer's hint is
// honoured, unless the kernel runs out of free 2 MiB blocks.
std::string transparent_huge_pages(const std::string& path = "/sys/kernel/mm/transparent_hugepage/enabled");
// What this process holds on huge pages, in bytes (AnonHugePages in `path`),
// or -1 where it cannot be read: what the hint actually got.
long huge_page_bytes(const std::string& path = "/proc/self/smaps_rollup");

template <class T>
struct BufferAllocator {
    // The buffers promise a cache line's alignment, no more.
    static_assert(alignof(T) <= kCacheLineBytes, "BufferAllocator aligns to a cache line only");
    using value_type = T;
    BufferAllocator() = default;
    template <class U>
    BufferAllocator(const BufferAllocator<U>&) noexcept {}
    T* allocate(std::size_t n) {
        if (n > std::size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(allocate_buffer(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t) noexcept { std::free(p); }
    template <class U>
    bool operator==(const BufferAllocator<U>&) const noexcept { return true; }
};

template <class T>
using AlignedVector = std::vector<T, BufferAllocator<T>>;

}  // namespace hlat
