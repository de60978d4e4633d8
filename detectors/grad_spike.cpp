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

// The paper's gradient-norm spikes: an alert when the norm passes alert_ratio
// x its running mean, once per spike episode, and when an episode lasts.
class GradSpike : public Detector {
  public:
    explicit GradSpike(const GradSpikeConfig& c) : c_(c), tracker_(c.window, c.rule, c.threshold) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        if (!s.has("grad_norm")) return;  // a step of other series (a held-out loss alone) is no step of this one
        const double grad_norm = s.value("grad_norm");
        if (std::isfinite(grad_norm)) seen_++;
        SpikeTracker::Observation o = tracker_.observe(grad_norm);
        if (!o.in_episode) {
            alerted_ratio_ = alerted_length_ = false;
            return;
        }
        double ratio = grad_norm / o.mean;
        const double alert_ratio = seen_ <= c_.warmup_steps ? c_.warmup_alert_ratio : c_.alert_ratio;
        if (o.window_full && ratio > alert_ratio && !alerted_ratio_) {
            alerted_ratio_ = true;
            out.push_back(make_alert(
                "grad_spike", "warning", s.step,
                fmt::format("gradient norm {:.4g} is {:.1f}x its mean of the last {} steps ({:.4g})", grad_norm,
                            ratio, c_.window, o.mean),
                {{"grad_norm", grad_norm}, {"mean", o.mean}, {"ratio", ratio}, {"window", c_.window}}));
        }
        if (o.episode_length >= c_.sustained_steps && !alerted_length_) {
            alerted_length_ = true;
            out.push_back(make_alert(
                "sustained_grad_spike", "critical", s.step,
                fmt::format("gradient norm has stayed above its running mean for {} steps: a sign of coming "
                            "divergence",
                            o.episode_length),
                {{"grad_norm", grad_norm}, {"mean", o.mean}, {"episode_steps", o.episode_length}}));
        }
    }

    json state() const override {
        return {{"tracker", tracker_.state()}, {"alerted_ratio", alerted_ratio_}, {"alerted_length", alerted_length_},
                {"seen", seen_}};
    }
    void restore(const json& j) override {
        tracker_.restore(j.at("tracker"));
        seen_ = j.value("seen", (int64_t)c_.warmup_steps + 1);  // a state saved before it counted: past warm-up
        alerted_ratio_ = j.at("alerted_ratio").get<bool>();
        alerted_length_ = j.at("alerted_length").get<bool>();
    }

  private:
    GradSpikeConfig c_;
    SpikeTracker tracker_;
    bool alerted_ratio_ = false, alerted_length_ = false;
    int64_t seen_ = 0;  // finite gradient norms so far: the first warmup_steps are judged by warmup_alert_ratio
};

}  // namespace

Registration registered::grad_spike(const DetectorsConfig& c) {
    return {"grad_spike", {"grad_norm"}, {}, std::make_unique<GradSpike>(c.grad_spike), c.grad_spike.policy};
}

}  // namespace hlat::detectors
