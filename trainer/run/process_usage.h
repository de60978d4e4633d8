// The trainer process's own CPU use and memory, sampled once per step for
// the page's system panel (keys cpu_pct and rss_mb).
#pragma once

namespace hlat {

class ProcessUsage {
  public:
    ProcessUsage();
    // CPU time of all threads over wall time since the previous call, in
    // percent (200 = two cores busy).
    double cpu_percent();
    // Resident set size now, in MB (from /proc/self/statm; 0 where unreadable).
    static double rss_mb();

  private:
    double last_cpu_, last_wall_;
};

}  // namespace hlat
