// Where a training step's time goes, kernel by kernel: `hlat profile` turns it
// on for a few steps and prints each kernel's milliseconds beside what its
// arithmetic (GEMMs, attention) or its bytes (everything memory-bound) would
// take at this CPU's measured ceilings. Off by default: a scope then costs one
// load and one branch, no clock read (its byte count is computed regardless,
// so counts that cost more than arithmetic ask active() first).
//
// Scopes are opened on the thread that drives the step (outside OpenMP
// regions), so nesting is a stack: a kernel's time is its own, a scope inside
// another (a narrowing inside a linear layer) is taken out of its parent.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace hlat {

struct KernelTotals {
    double seconds = 0.0;  // own time: nested scopes' time taken out
    long calls = 0;
    double bytes = 0.0;  // bytes each call reads and writes, as the kernel is written (no cache effects)
    double flops = 0.0;  // multiply-adds count 2; 0 for memory-bound kernels
};

class KernelProfile {
  public:
    KernelProfile() = default;
    ~KernelProfile() { stop(); }
    KernelProfile(const KernelProfile&) = delete;
    KernelProfile& operator=(const KernelProfile&) = delete;
    // The profile scopes report to, or null when profiling is off.
    static KernelProfile* active() { return active_; }
    void start() { active_ = this; }
    void stop() {
        if (active_ == this) active_ = nullptr;
    }
    const std::map<std::string, KernelTotals>& totals() const { return totals_; }

  private:
    friend class KernelScope;
    static KernelProfile* active_;
    std::map<std::string, KernelTotals> totals_;
    std::vector<double> child_seconds_;  // per open scope: time its nested scopes took
};

// Times one kernel call: `name` and, when given, `detail` (a tensor's name) key
// the totals; bytes and flops are what this call moves and computes.
class KernelScope {
  public:
    KernelScope(const char* name, double bytes, double flops = 0.0, const std::string* detail = nullptr) {
        if (KernelProfile::active_) begin(name, bytes, flops, detail);
    }
    ~KernelScope();
    KernelScope(const KernelScope&) = delete;
    KernelScope& operator=(const KernelScope&) = delete;

  private:
    // Records nothing inside an OpenMP parallel region: only the thread that
    // drives the step keeps the stack.
    void begin(const char* name, double bytes, double flops, const std::string* detail);

    KernelProfile* profile_ = nullptr;
    const char* name_ = nullptr;
    const std::string* detail_ = nullptr;
    double bytes_ = 0.0, flops_ = 0.0;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace hlat
