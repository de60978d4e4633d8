#include "trainer/model/kernel_profile.h"

#include <omp.h>

namespace hlat {

KernelProfile* KernelProfile::active_ = nullptr;

void KernelScope::begin(const char* name, double bytes, double flops, const std::string* detail) {
    if (omp_in_parallel()) return;
    profile_ = KernelProfile::active_;
    name_ = name;
    detail_ = detail;
    bytes_ = bytes;
    flops_ = flops;
    profile_->child_seconds_.push_back(0.0);
    t0_ = std::chrono::steady_clock::now();
}

KernelScope::~KernelScope() {
    if (!profile_) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::vector<double>& stack = profile_->child_seconds_;
    const double nested = stack.back();
    stack.pop_back();
    if (!stack.empty()) stack.back() += seconds;
    KernelTotals& t = profile_->totals_[detail_ ? std::string(name_) + " " + *detail_ : std::string(name_)];
    t.seconds += seconds - nested;
    t.calls++;
    t.bytes += bytes_;
    t.flops += flops_;
}

}  // namespace hlat
