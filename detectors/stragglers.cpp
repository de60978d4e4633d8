#include "detectors/stragglers.h"

#include <algorithm>
#include <cmath>

namespace hlat {

namespace {

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StragglerSummary summarize_stragglers(const std::vector<double>& compute) {
    StragglerSummary worst{NAN, -1};
    if (compute.size() < 2) return worst;
    for (size_t r = 0; r < compute.size(); r++) {
        std::vector<double> others = compute;
        others.erase(others.begin() + r);
        const double median = median_of(others);
        const double ratio = median > 0 ? compute[r] / median : NAN;
        if (!std::isnan(ratio) && (std::isnan(worst.ratio) || ratio > worst.ratio)) worst = {ratio, (int)r};
    }
    return worst;
}

}  // namespace hlat
