#include "detectors/registry.h"

#include "detectors/detector_util.h"
#include "detectors/watch_levels.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

using namespace watch_levels;

// Norm weights first (they sit near 1, where a bf16 step is 2^-7 and an
// update of lr x 1 is lost first), then the rest by how much they lose.
std::vector<std::pair<std::string, double>> worst_first(std::vector<std::pair<std::string, double>> stalled) {
    auto is_norm = [](const std::string& name) { return name.find("norm") != std::string::npos; };
    std::stable_sort(stalled.begin(), stalled.end(), [&](const auto& a, const auto& b) {
        if (is_norm(a.first) != is_norm(b.first)) return is_norm(a.first);
        return a.second > b.second;
    });
    return stalled;
}

// Tensors (or tensor kinds) whose updates rounding throws away: in pure bf16
// with round-to-nearest, an update below half a bf16 step of its weight
// leaves the weight as it was, and late in a decaying schedule most updates
// are. The input, lost_update_share, is the share of a tensor's updates
// that left its weight unchanged (docs/internals.md), recorded only where the update is
// lost (hlat's bf16 mode; a PyTorch run's parameters held in bf16 or fp16):
// fp32, mixed precision, stochastic rounding and Kahan summation record none.
// Judged at the steps the store keeps (every flight_recorder.store_every-th),
// so a replay of the store raises the same alert at the same step; not
// counted while the learning rate is still rising (lr_max_ahead above lr).
class PrecisionStall : public Detector {
  public:
    PrecisionStall(const PrecisionStallConfig& c, int store_every) : c_(c), store_every_(std::max(store_every, 1)) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const VectorValue* v = s.vector("lost_update_share");
        if (!v || s.step % store_every_ != 0) return;
        if (schedule_growth(s, 1.0) > 1.0) return above_since_.clear();  // warm-up: the rate will grow out of it
        std::vector<std::pair<std::string, double>> stalled;
        for (size_t i = 0; i < v->values.size(); i++) {
            const double x = v->values[i];
            const std::string label = v->label(i);
            if (!(x > c_.share)) {
                above_since_.erase(label);
                if (!(x > c_.share / 2)) alerted_.erase(label);  // recovered: a new stall alerts again
                continue;
            }
            const int64_t since = above_since_.emplace(label, s.step).first->second;
            if (s.step - since >= c_.steps && alerted_.insert(label).second) stalled.push_back({label, x});
        }
        if (!stalled.empty()) out.push_back(alert_for(s.step, worst_first(std::move(stalled))));
    }

    json state() const override { return {{"above_since", above_since_}, {"alerted", alerted_}}; }
    void restore(const json& j) override {
        above_since_ = j.at("above_since").get<std::map<std::string, int64_t>>();
        alerted_ = j.at("alerted").get<std::set<std::string>>();
    }

  private:
    Alert alert_for(int64_t step, const std::vector<std::pair<std::string, double>>& stalled) const {
        std::string names;
        json tensors = json::object();
        double worst = 0.0;
        for (size_t i = 0; i < stalled.size(); i++) {
            if (i < 4) names += fmt::format("{}{} {:.0f}%", i ? ", " : "", stalled[i].first, 100 * stalled[i].second);
            tensors[stalled[i].first] = stalled[i].second;
            worst = std::max(worst, stalled[i].second);
        }
        if (stalled.size() > 4) names += fmt::format(" and {} more", stalled.size() - 4);
        return make_alert(
            "precision_stall", "warning", step,
            fmt::format("bf16 rounding has thrown away more than {:.0f}% of the updates of {} tensor{} for {} steps "
                        "or more: {}. They have stopped learning; stochastic rounding (bf16_sr), Kahan summation "
                        "(bf16_kahan) or fp32 master weights (mixed) keep those updates",
                        100 * c_.share, stalled.size(), stalled.size() == 1 ? "" : "s", c_.steps, names),
            {{"tensors", tensors}, {"value", worst}, {"share", c_.share}, {"steps", c_.steps},
             {"fixes", {"bf16_sr", "bf16_kahan", "mixed"}}});
    }

    PrecisionStallConfig c_;
    int store_every_;
    std::map<std::string, int64_t> above_since_;  // tensor -> the first judged step of its stretch above `share`
    std::set<std::string> alerted_;               // alerted, until its share falls below half of `share`
};

}  // namespace

Registration registered::precision_stall(const DetectorsConfig& c) {
    return {"precision_stall",
            {"lost_update_share", "lr", "lr_max_ahead"},
            {},
            std::make_unique<PrecisionStall>(c.precision_stall, c.flight_recorder.store_every),
            c.precision_stall.policy};
}

}  // namespace hlat::detectors
