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

// The output logits' mean log Z against where it stood after warm-up.
class LogzDrift : public Detector {
  public:
    static constexpr int kReferenceSteps = 10;
    explicit LogzDrift(const LogzDriftConfig& c) : c_(c) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double z = s.value("logz_mean");
        if (!std::isfinite(z) || seen_++ < c_.warmup_steps) return;
        if (reference_n_ < kReferenceSteps) {
            reference_sum_ += z, reference_n_++;
            return;
        }
        const double reference = reference_sum_ / reference_n_;
        const double drift = std::abs(z - reference);
        if (drift < c_.drift / 2) active_ = false;
        if (drift <= c_.drift || active_) return;
        active_ = true;
        out.push_back(make_alert("logz_drift", "warning", s.step,
                                 fmt::format("mean log Z of the output logits is {:.4g}, {:.3g} nats from {:.4g} "
                                             "after warm-up (bound {:.3g})",
                                             z, drift, reference, c_.drift),
                                 {{"logz_mean", z}, {"reference", reference}, {"drift", drift}, {"bound", c_.drift}}));
    }
    json state() const override {
        return {{"seen", seen_}, {"sum", reference_sum_}, {"n", reference_n_}, {"active", active_}};
    }
    void restore(const json& j) override {
        seen_ = j.at("seen").get<int64_t>();
        reference_sum_ = j.at("sum").get<double>();
        reference_n_ = j.at("n").get<int>();
        active_ = j.at("active").get<bool>();
    }

  private:
    LogzDriftConfig c_;
    int64_t seen_ = 0;
    double reference_sum_ = 0.0;
    int reference_n_ = 0;
    bool active_ = false;
};

}  // namespace

Registration registered::logz_drift(const DetectorsConfig& c) {
    return {"logz_drift", {"logz_mean"}, {}, std::make_unique<LogzDrift>(c.logz_drift), c.logz_drift.policy};
}

}  // namespace hlat::detectors
