#include "trainer/model/aligned.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>

namespace hlat {

void* allocate_buffer(std::size_t bytes) {
    const bool huge = bytes >= kHugePageBytes;
    const std::size_t align = huge ? kHugePageBytes : kCacheLineBytes;
    if (bytes > std::size_t(-1) - align) throw std::bad_alloc();  // the rounding below would wrap
    const std::size_t size = (bytes + align - 1) / align * align;  // aligned_alloc wants a multiple
    void* p = std::aligned_alloc(align, size == 0 ? align : size);
    if (!p) throw std::bad_alloc();
    // A hint: its failure (THP off, an old kernel) leaves ordinary pages.
    if (huge) madvise(p, size, MADV_HUGEPAGE);
    return p;
}

std::string transparent_huge_pages(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) return "unknown";
    const auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return "unknown";
    return line.substr(open + 1, close - open - 1);
}

long huge_page_bytes(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        long kib = 0;
        if (std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kib) == 1) return kib * 1024;
    }
    return -1;
}

}  // namespace hlat
