#include "trainer/run/process_usage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

namespace hlat {
namespace {

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

double wall_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

ProcessUsage::ProcessUsage() : last_cpu_(cpu_seconds()), last_wall_(wall_seconds()) {}

double ProcessUsage::cpu_percent() {
    double cpu = cpu_seconds(), wall = wall_seconds();
    double pct = wall > last_wall_ ? 100.0 * (cpu - last_cpu_) / (wall - last_wall_) : 0.0;
    last_cpu_ = cpu;
    last_wall_ = wall;
    return pct;
}

double ProcessUsage::rss_mb() {
    std::ifstream statm("/proc/self/statm");
    long size = 0, resident = 0;
    if (!(statm >> size >> resident)) return 0.0;
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

}  // namespace hlat
