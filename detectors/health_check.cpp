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

// The health check's GEMMs of exact integers coming out wrong on a rank.
class HealthCheck : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double failures = s.value("health_check_failures");
        if (!(failures > 0)) return;  // NaN: not checked at this step
        std::string detail = s.detail("health_check");
        if (detail.empty()) detail = fmt::format("{:.0f} rank(s) computed wrong numbers", failures);
        out.push_back(make_alert("health_check", "critical", s.step,
                                 detail +
                                     " in the health check (silent data corruption: its GEMMs are wrong, and so is "
                                     "what it contributes to training)",
                                 {{"ranks", failures}}));
    }
};

}  // namespace

Registration registered::health_check(const DetectorsConfig& c) {
    return {"health_check", {"health_check_failures"}, {"health_check"}, std::make_unique<HealthCheck>(),
            c.health_check.policy};
}

}  // namespace hlat::detectors
