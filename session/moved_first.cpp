#include "session/moved_first.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

namespace hlat::session {
namespace {

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

// Each element's value at points[at] over the median of its previous values.
std::vector<double> ratios(const std::vector<const telemetry::VectorPoint*>& points, size_t at, int baseline) {
    const size_t n = points[at]->values.size();
    std::vector<double> out(n, NAN);
    const size_t from = at > (size_t)baseline ? at - baseline : 0;
    if (at - from < 3) return out;  // too little history to call anything a move
    for (size_t e = 0; e < n; e++) {
        std::vector<double> before;
        for (size_t i = from; i < at; i++)
            if (e < points[i]->values.size() && std::isfinite(points[i]->values[e])) before.push_back(points[i]->values[e]);
        const double m = median(std::move(before)), x = points[at]->values[e];
        // A value that went non-finite moved more than any finite ratio.
        out[e] = !std::isfinite(x) ? INFINITY : m > 0 ? x / m : NAN;
    }
    return out;
}

}  // namespace

nlohmann::json moved_first(const FlightRecorder& recorder, int64_t step,
                           const std::function<std::shared_ptr<const std::vector<std::string>>(const std::string&)>& labels,
                           const MovedFirstRule& rule) {
    for (const char* key : {"tensor_grad_norm", "tensor_update_norm", "residual_rms"}) {
        std::vector<const telemetry::VectorPoint*> points = recorder.series(key);
        auto alert_at = std::find_if(points.begin(), points.end(), [&](auto* p) { return p->step == step; });
        if (alert_at == points.end()) continue;
        const size_t last = alert_at - points.begin();
        // The first step within the lookback at which some element passed the
        // ratio: the move began there; at the alert step when none did before.
        size_t first = last;
        for (size_t i = last >= (size_t)rule.lookback ? last - rule.lookback : 0; i < last; i++) {
            std::vector<double> r = ratios(points, i, rule.baseline_steps);
            if (std::any_of(r.begin(), r.end(), [&](double x) { return x > rule.ratio; })) {
                first = i;
                break;
            }
        }
        std::vector<double> r = ratios(points, first, rule.baseline_steps);
        std::vector<size_t> order(r.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        auto score = [&](size_t i) { return std::isnan(r[i]) ? -1.0 : r[i]; };
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score(a) > score(b); });
        if (order.empty() || score(order[0]) < 0) continue;
        std::shared_ptr<const std::vector<std::string>> names = labels(key);
        auto name = [&](size_t i) { return names && i < names->size() ? (*names)[i] : fmt::format("#{}", i); };
        auto number = [](double x) { return std::isfinite(x) ? nlohmann::json(std::round(x * 100) / 100) : nlohmann::json("inf"); };
        nlohmann::json top = nlohmann::json::array();
        for (size_t k = 0; k < std::min<size_t>(3, order.size()) && score(order[k]) >= 0; k++)
            top.push_back({{"label", name(order[k])}, {"ratio", number(r[order[k]])}});
        return {{"key", key},
                {"step", points[first]->step},
                {"label", name(order[0])},
                {"ratio", number(r[order[0]])},
                {"moved", r[order[0]] > rule.ratio},
                {"top", top}};
    }
    return nullptr;
}

}  // namespace hlat::session
