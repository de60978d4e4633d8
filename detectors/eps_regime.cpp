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

// Tensors whose Adam denominators are mostly epsilon.
class EpsRegime : public Detector {
  public:
    explicit EpsRegime(const EpsRegimeConfig& c) : c_(c) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const VectorValue* v = s.vector("eps_share");
        if (!v || seen_++ < c_.warmup_steps) return;
        std::vector<std::pair<std::string, double>> entered;
        for (size_t i = 0; i < v->values.size(); i++) {
            const double x = v->values[i];
            const std::string label = v->label(i);
            if (x < c_.share / 2) in_regime_.erase(label);
            if (x > c_.share && in_regime_.insert(label).second) entered.push_back({label, x});
        }
        if (entered.empty()) return;
        std::string names;
        json tensors = json::object();
        for (size_t i = 0; i < entered.size(); i++) {
            if (i < 4) names += fmt::format("{}{} {:.2f}", i ? ", " : "", entered[i].first, entered[i].second);
            tensors[entered[i].first] = entered[i].second;
        }
        if (entered.size() > 4) names += fmt::format(" and {} more", entered.size() - 4);
        out.push_back(make_alert("eps_regime", "warning", s.step,
                                 fmt::format("{} tensor{} entered the epsilon regime (share of Adam coordinates "
                                             "with sqrt(v) < eps above {:.2f}): {}",
                                             entered.size(), entered.size() == 1 ? "" : "s", c_.share, names),
                                 {{"tensors", tensors}, {"share", c_.share}}));
    }
    json state() const override { return {{"seen", seen_}, {"in_regime", in_regime_}}; }
    void restore(const json& j) override {
        seen_ = j.at("seen").get<int64_t>();
        in_regime_ = j.at("in_regime").get<std::set<std::string>>();
    }

  private:
    EpsRegimeConfig c_;
    int64_t seen_ = 0;
    std::set<std::string> in_regime_;
};

}  // namespace

Registration registered::eps_regime(const DetectorsConfig& c) {
    return {"eps_regime", {"eps_share"}, {}, std::make_unique<EpsRegime>(c.eps_regime), c.eps_regime.policy};
}

}  // namespace hlat::detectors
