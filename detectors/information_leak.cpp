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

// The causality probe seeing later tokens change early positions' logits.
class InformationLeak : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double leak = s.value("causality_leak");
        if (!(leak > 0)) return;  // NaN: not probed at this step
        out.push_back(make_alert(
            "information_leak", "critical", s.step,
            fmt::format("causality probe: logits at early positions changed (by up to {:.3g}) when only later tokens "
                        "changed: the model sees the future (check the attention mask)",
                        leak),
            {{"max_logit_difference", leak}}));
    }
};

}  // namespace

Registration registered::information_leak(const DetectorsConfig& c) {
    return {"information_leak", {"causality_leak"}, {}, std::make_unique<InformationLeak>(), c.leak_probe.policy};
}

}  // namespace hlat::detectors
