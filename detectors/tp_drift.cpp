#include "detectors/registry.h"

#include "detectors/detector_util.h"

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

// Replicated weights drifting apart across tensor-parallel ranks.
class TpDrift : public Detector {
  public:
    explicit TpDrift(const TpDriftConfig& c) : c_(c) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double drift = s.value("tp_drift");
        if (std::isnan(drift)) return;
        growing_ = !recent_.empty() && drift > recent_.back() ? growing_ + 1 : 0;
        recent_.push_back(drift);
        if ((int)recent_.size() > c_.growth_checks + 1) recent_.pop_front();
        bool above = drift > c_.threshold;
        bool steady_growth = growing_ >= c_.growth_checks;
        if ((above || steady_growth) && !alerted_) {
            alerted_ = true;
            std::string why = above ? fmt::format("above the threshold {:.3g}", c_.threshold)
                                    : fmt::format("growing at each of the last {} checks", c_.growth_checks);
            // Where: the trainer's note of the most drifted tensor and rank, when it sent one.
            const std::string where = s.detail("tp_drift");
            out.push_back(make_alert(
                "tp_drift", "warning", s.step,
                fmt::format("replicated weights drifted apart across tensor-parallel ranks{}: max |w - w_ref| = "
                            "{:.3g}, {} (stochastic rounding keyed by rank? re-sync with parallel.resync_every)",
                            where.empty() ? "" : ", most in " + where, drift, why),
                {{"tp_drift", drift}, {"threshold", c_.threshold}, {"growing_checks", growing_}, {"where", where}}));
        }
        if (!above && !steady_growth) alerted_ = false;
    }

    json state() const override {
        return {{"recent", numbers(recent_)}, {"growing", growing_}, {"alerted", alerted_}};
    }
    void restore(const json& j) override {
        recent_ = numbers(j.at("recent"), c_.growth_checks + 1);
        growing_ = j.at("growing").get<int>();
        alerted_ = j.at("alerted").get<bool>();
    }

  private:
    TpDriftConfig c_;
    std::deque<double> recent_;
    int growing_ = 0;
    bool alerted_ = false;
};

}  // namespace

Registration registered::tp_drift(const DetectorsConfig& c) {
    return {"tp_drift", {"tp_drift"}, {"tp_drift"}, std::make_unique<TpDrift>(c.tp_drift), c.tp_drift.policy};
}

}  // namespace hlat::detectors
