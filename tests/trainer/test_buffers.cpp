// The kernels' buffers (aligned.h): every one starts on a cache line, and one
// of 2 MiB or more starts on a huge page and carries the kernel's huge-page
// hint, which is what makes the kernel back it with 2 MiB pages (the step's
// speed on a virtual machine depends on it). The hint is read back from
// /proc/self/smaps: "hg" among the flags of the mapping that holds the buffer.
#include "test_util.h"
#include "trainer/model/aligned.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace hlat {
namespace {

// The VmFlags line of the mapping of /proc/self/smaps that holds p ("" if none).
std::string mapping_flags(const void* p) {
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2)
            inside = lo <= at && at < hi;
        else if (inside && line.rfind("VmFlags:", 0) == 0)
            return line;
    }
    return "";
}

bool kernel_has_transparent_huge_pages() {
    struct stat st;
    return stat("/sys/kernel/mm/transparent_hugepage/enabled", &st) == 0;
}

TEST(Buffers, SmallOnesStartOnACacheLine) {
    for (long n : {1L, 3L, 1000L, 100000L}) {
        AlignedVector<float> v(n, 1.0f);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % kCacheLineBytes, 0u) << n;
    }
}

TEST(Buffers, LargeOnesStartOnAHugePageWithTheHint) {
    // Just under a huge page, exactly one, and a size no multiple of one.
    for (long bytes : {(long)kHugePageBytes - 4, (long)kHugePageBytes, 3 * (long)kHugePageBytes + 12}) {
        AlignedVector<float> v(bytes / 4, 2.0f);
        const auto at = reinterpret_cast<std::uintptr_t>(v.data());
        const bool huge = (std::size_t)bytes >= kHugePageBytes;
        EXPECT_EQ(at % (huge ? kHugePageBytes : kCacheLineBytes), 0u) << bytes;
        if (huge && kernel_has_transparent_huge_pages()) {
            // The whole buffer: madvise splits the mapping where it stops.
            for (const float* element : {v.data(), &v.back()})
                EXPECT_NE(mapping_flags(element).find(" hg"), std::string::npos)
                    << bytes << ": " << mapping_flags(element);
        }
        EXPECT_EQ(v.back(), 2.0f);
    }
}

TEST(Buffers, GrowAndCopyLikeAnyVector) {
    AlignedVector<int> v;
    for (int i = 0; i < 1 << 20; i++) v.push_back(i);  // 4 MiB: crosses to huge pages on the way
    AlignedVector<int> copy = v;
    ASSERT_EQ(copy.size(), v.size());
    for (int i : {0, 4095, 1 << 19, (1 << 20) - 1}) EXPECT_EQ(copy[i], i);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(copy.data()) % kHugePageBytes, 0u);
}

TEST(Buffers, NameTheKernelsHugePageSetting) {
    const std::string path = testing::TempDir() + "thp_enabled." + std::to_string(getpid());
    for (const char* setting : {"always", "madvise", "never"}) {
        std::string line;
        for (const char* word : {"always", "madvise", "never"})
            line += (line.empty() ? "" : " ") + (word == std::string(setting) ? "[" + std::string(word) + "]" : word);
        std::ofstream(path) << line << "\n";
        EXPECT_EQ(transparent_huge_pages(path), setting) << line;
    }
    std::ofstream(path) << "no brackets here\n";
    EXPECT_EQ(transparent_huge_pages(path), "unknown");
    EXPECT_EQ(transparent_huge_pages(path + ".absent"), "unknown");
    std::remove(path.c_str());
    // This machine's, where the kernel has THP: one of the three.
    if (kernel_has_transparent_huge_pages()) {
        const std::string here = transparent_huge_pages();
        EXPECT_TRUE(here == "always" || here == "madvise" || here == "never") << here;
    }
}

// What the process holds on huge pages, read from a smaps_rollup: the
// AnonHugePages line in bytes, -1 without one.
TEST(Buffers, CountWhatTheKernelGranted) {
    const std::string path = testing::TempDir() + "smaps_rollup." + std::to_string(getpid());
    std::ofstream(path) << "Rss:             1250556 kB\nAnonymous:       1200000 kB\nAnonHugePages:   1161216 kB\n";
    EXPECT_EQ(huge_page_bytes(path), 1161216L * 1024);
    std::ofstream(path) << "Rss:             1250556 kB\n";
    EXPECT_EQ(huge_page_bytes(path), -1);
    EXPECT_EQ(huge_page_bytes(path + ".absent"), -1);
    std::remove(path.c_str());
    // This process's, where Linux reports it: whatever it holds, never negative.
    std::ifstream rollup("/proc/self/smaps_rollup");
    if (rollup) {
        EXPECT_GE(huge_page_bytes(), 0);
    }
}

}  // namespace
}  // namespace hlat
