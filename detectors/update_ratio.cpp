#include "detectors/registry.h"

#include "detectors/detector_util.h"
#include "detectors/watch_levels.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>
#include <string>
#include <vector>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

using namespace watch_levels;

// Every tensor's update-to-weight ratio against its own recent median.
class UpdateRatio : public Detector {
  public:
    explicit UpdateRatio(const UpdateRatioConfig& c) : c_(c) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const VectorValue* v = s.vector("update_ratio");
        if (!v) return;
        if (recent_.size() != v->values.size()) recent_.assign(v->values.size(), {});
        std::vector<double> jumps(v->values.size(), NAN);
        if (seen_++ >= c_.warmup_steps)
            for (size_t i = 0; i < jumps.size(); i++) jumps[i] = jump_of(i, v->values[i]);
        remember(*v);
        std::vector<double> finite;
        for (double j : jumps)
            if (std::isfinite(j)) finite.push_back(j);
        if (finite.size() * 2 < jumps.size() || finite.empty()) return;  // most tensors have no history yet
        const double typical = median(finite);
        if (typical <= c_.jump) {
            active_ = false;
            return;
        }
        if (active_) return;
        active_ = true;
        const size_t most = (size_t)(std::max_element(jumps.begin(), jumps.end(), [](double a, double b) {
                                         return std::isnan(a) || (!std::isnan(b) && b > a);
                                     }) - jumps.begin());
        out.push_back(make_alert(
            "update_ratio", "warning", s.step,
            fmt::format("the update-to-weight ratio jumped {:.3g}x in one step (median over {} tensors, against each "
                        "one's median of the previous {} steps; the most: {} {:.3g}x, now {:.3g})",
                        typical, finite.size(), c_.window, v->label(most), jumps[most], v->values[most]),
            {{"jump", typical}, {"threshold", c_.jump}, {"tensor", v->label(most)}, {"tensor_jump", jumps[most]},
             {"ratio", v->values[most]}, {"tensors", finite.size()}}));
    }
    json state() const override {
        json recent = json::array();
        for (const auto& r : recent_) {
            json xs = json::array();
            for (double x : r) xs.push_back(number(x));
            recent.push_back(std::move(xs));
        }
        return {{"seen", seen_}, {"active", active_}, {"recent", std::move(recent)}};
    }
    void restore(const json& j) override {
        seen_ = j.at("seen").get<int64_t>();
        active_ = j.at("active").get<bool>();
        recent_.clear();
        for (const json& xs : j.at("recent")) {
            recent_.emplace_back();
            for (const json& x : xs) recent_.back().push_back(number(x));
        }
    }

  private:
    double jump_of(size_t i, double ratio) const {
        if ((int)recent_[i].size() < c_.window || !(ratio > 0) || !std::isfinite(ratio)) return NAN;
        const double before = median(std::vector<double>(recent_[i].begin(), recent_[i].end()));
        return before > 0 ? ratio / before : NAN;
    }
    void remember(const VectorValue& v) {
        for (size_t i = 0; i < v.values.size(); i++) {
            recent_[i].push_back(v.values[i]);
            if ((int)recent_[i].size() > c_.window) recent_[i].pop_front();
        }
    }
    UpdateRatioConfig c_;
    int64_t seen_ = 0;
    bool active_ = false;
    std::vector<std::deque<double>> recent_;  // per tensor, its last `window` ratios
};

}  // namespace

Registration registered::update_ratio(const DetectorsConfig& c) {
    return {"update_ratio", {"update_ratio"}, {}, std::make_unique<UpdateRatio>(c.update_ratio), c.update_ratio.policy};
}

}  // namespace hlat::detectors
