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

// A training loss too low to be true: below the floor, or far below the
// held-out loss (a leak).
class LossFloor : public Detector {
  public:
    explicit LossFloor(const LossFloorConfig& c) : c_(c) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        if (std::isfinite(s.value("heldout_loss"))) heldout_ = s.value("heldout_loss"), heldout_step_ = s.step;
        const double loss = s.value("loss");
        if (!std::isfinite(loss)) return;
        ema_ = std::isnan(ema_) ? loss : 0.9 * ema_ + 0.1 * loss;
        bool below_floor = ema_ < c_.floor;
        if (below_floor && !floor_alerted_) {
            floor_alerted_ = true;
            out.push_back(make_alert(
                "loss_floor", "critical", s.step,
                fmt::format("training loss has slid to {:.4g} nats, below the floor of {:.4g}: is the model seeing "
                            "the tokens it predicts?",
                            ema_, c_.floor),
                {{"smoothed_loss", ema_}, {"floor", c_.floor}}));
        }
        if (!below_floor) floor_alerted_ = false;
        const bool recent = std::isfinite(heldout_) && s.step - heldout_step_ <= c_.heldout_max_age;
        if (!recent) return;  // no yardstick at this step: the count neither grows nor breaks
        bool below_heldout = ema_ < heldout_ - c_.heldout_gap;
        gap_steps_ = below_heldout ? gap_steps_ + 1 : 0;
        if (gap_steps_ >= c_.heldout_gap_steps && !gap_alerted_) {
            gap_alerted_ = true;
            out.push_back(make_alert(
                "loss_below_heldout", "warning", s.step,
                fmt::format("training loss {:.4g} is {:.2f} nats below the held-out loss {:.4g} (of step {}), and "
                            "has been more than {:.4g} below each recent held-out loss for {} steps",
                            ema_, heldout_ - ema_, heldout_, heldout_step_, c_.heldout_gap, gap_steps_),
                {{"smoothed_loss", ema_}, {"heldout_loss", heldout_}, {"gap", c_.heldout_gap}, {"steps", gap_steps_}}));
        }
        if (!below_heldout) gap_alerted_ = false;
    }

    json state() const override {
        return {{"ema", number(ema_)}, {"heldout", number(heldout_)}, {"heldout_step", heldout_step_},
                {"floor_alerted", floor_alerted_}, {"gap_alerted", gap_alerted_}, {"gap_steps", gap_steps_}};
    }
    void restore(const json& j) override {
        ema_ = number(j.at("ema"));
        heldout_ = number(j.at("heldout"));
        floor_alerted_ = j.at("floor_alerted").get<bool>();
        gap_alerted_ = j.at("gap_alerted").get<bool>();
        gap_steps_ = j.value("gap_steps", 0);  // absent from the state of checkpoints before it counted
        heldout_step_ = j.value("heldout_step", (int64_t)0);
    }

  private:
    LossFloorConfig c_;
    double ema_ = NAN, heldout_ = NAN;
    bool floor_alerted_ = false, gap_alerted_ = false;
    int gap_steps_ = 0;  // steps in a row below the held-out loss by more than the gap
    int64_t heldout_step_ = 0;  // where heldout_ was measured
};

}  // namespace

Registration registered::loss_floor(const DetectorsConfig& c) {
    return {"loss_floor", {"loss", "heldout_loss"}, {}, std::make_unique<LossFloor>(c.loss_floor), c.loss_floor.policy};
}

}  // namespace hlat::detectors
