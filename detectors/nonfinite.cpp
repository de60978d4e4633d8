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

// Once per stretch of non-finite steps: a run that stays NaN for 600 steps
// (an imported log that went bad) is one alert, not 600; a finite step
// re-arms it.
class NonFinite : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double loss = s.value("loss"), grad_norm = s.value("grad_norm");
        const bool loss_bad = s.has("loss") && !std::isfinite(loss);
        const bool grad_bad = s.has("grad_norm") && !std::isfinite(grad_norm);
        if (!loss_bad && !grad_bad) {
            if (s.has("loss") || s.has("grad_norm")) in_stretch_ = false;
            return;
        }
        if (in_stretch_) return;
        in_stretch_ = true;
        const char* what = loss_bad && grad_bad ? "loss and gradient norm are" : loss_bad ? "loss is" : "gradient norm is";
        const char* consequence = s.value("update_skipped") == 1 ? "the update of this step was skipped"
                                                                 : "the trainer reported a non-finite value";
        auto shown = [](double x) { return std::isfinite(x) ? json(x) : json(fmt::format("{}", x)); };
        out.push_back(make_alert("nonfinite", "critical", s.step,
                                 fmt::format("{} not finite (loss {:.4g}, grad norm {:.4g}); {}", what, loss, grad_norm,
                                             consequence),
                                 {{"loss", shown(loss)}, {"grad_norm", shown(grad_norm)}}));
    }
    json state() const override { return {{"in_stretch", in_stretch_}}; }
    void restore(const json& j) override { in_stretch_ = j.value("in_stretch", false); }

  private:
    bool in_stretch_ = false;  // the steps since the last alert have all been non-finite
};

}  // namespace

Registration registered::nonfinite(const DetectorsConfig& c) {
    return {"nonfinite", {"loss", "grad_norm", "update_skipped"}, {}, std::make_unique<NonFinite>(), c.nonfinite.policy};
}

}  // namespace hlat::detectors
