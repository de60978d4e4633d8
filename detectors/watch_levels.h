// What the early-warning detectors share (attention logits and entropy, update
// ratios): a median, when each layer or head first crossed a watch level, the
// extreme element of a vector, and how much the learning rate will still grow.
// Internal to detectors/.
#pragma once

#include "detectors/step_view.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hlat::detectors::watch_levels {

using json = nlohmann::json;

inline double median(std::vector<double> xs) {
    if (xs.empty()) return NAN;
    const size_t mid = xs.size() / 2;
    std::nth_element(xs.begin(), xs.begin() + (long)mid, xs.end());
    return xs[mid];
}

// When each element first crossed a watch level on its way to the alert's
// bound: what says which layer or head moved first. Forgotten when the
// episode ends.
class FirstCrossing {
  public:
    void observe(const VectorValue& v, int64_t step, double level, bool upward) {
        for (size_t i = 0; i < v.values.size(); i++) {
            const double x = v.values[i];
            if (std::isfinite(x) && (upward ? x > level : x < level)) first_.emplace(v.label(i), step);
        }
    }
    // The earliest crossing, ties to the name first in order; nullopt while none.
    std::optional<std::pair<std::string, int64_t>> first() const {
        std::optional<std::pair<std::string, int64_t>> out;
        for (const auto& [label, step] : first_)
            if (!out || step < out->second) out = {label, step};
        return out;
    }
    void clear() { first_.clear(); }
    json state() const { return first_; }
    void restore(const json& j) { first_ = j.get<std::map<std::string, int64_t>>(); }

  private:
    std::map<std::string, int64_t> first_;
};

// The element with the largest (or smallest) value, and how many are past
// `bound`. NaN is no value; an infinite one is past any bound.
struct Extreme {
    size_t index = 0;
    double value = NAN;
    int past = 0;
};
inline Extreme extreme_of(const VectorValue& v, double bound, bool upward) {
    Extreme e;
    for (size_t i = 0; i < v.values.size(); i++) {
        const double x = v.values[i];
        if (std::isnan(x)) continue;
        if (upward ? x > bound : x < bound) e.past++;
        if (std::isnan(e.value) || (upward ? x > e.value : x < e.value)) e.index = i, e.value = x;
    }
    return e;
}

// How much larger than now the learning rate will still get, raised to
// `exponent`: 1 when the step has no lr_max_ahead (a client that does not
// know its schedule), when the rate only falls from here, or with exponent 0.
inline double schedule_growth(const StepView& s, double exponent) {
    const double lr = s.value("lr"), ahead = s.value("lr_max_ahead");
    if (exponent <= 0 || !(lr > 0) || !(ahead > lr) || !std::isfinite(ahead)) return 1.0;
    return std::pow(ahead / lr, exponent);
}

}  // namespace hlat::detectors::watch_levels
