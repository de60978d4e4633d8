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

// A loss above its recent maximum by the margin is judged at the next step:
// back down there, it was a one-step outlier (a hard batch; a rank-0 loss
// that is not all-reduced), kept as one info-level event at its step and
// left out of the window; still up, it is a jump, and warns.
class LossJump : public Detector {
  public:
    explicit LossJump(const LossJumpConfig& c) : c_(c) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double loss = s.value("loss");
        if (!std::isfinite(loss)) return;
        if (!std::isnan(pending_)) {
            judge_pending(s.step, loss, out);
        } else if ((int)recent_.size() == c_.window) {
            const double max = *std::max_element(recent_.begin(), recent_.end());
            const bool jump = loss > max + c_.margin;
            if (jump && !alerted_) {
                pending_ = loss, pending_step_ = s.step, pending_max_ = max;
                return;
            }
            if (!jump) alerted_ = false;
        }
        remember(loss);
    }

    json state() const override {
        return {{"recent", numbers(recent_)}, {"alerted", alerted_}, {"pending", number(pending_)},
                {"pending_step", pending_step_}, {"pending_max", number(pending_max_)}};
    }
    void restore(const json& j) override {
        recent_ = numbers(j.at("recent"), c_.window);
        alerted_ = j.at("alerted").get<bool>();
        pending_ = number(j.value("pending", json(nullptr)));  // absent from states saved before it judged outliers
        pending_step_ = j.value("pending_step", (int64_t)0);
        pending_max_ = number(j.value("pending_max", json(nullptr)));
    }

  private:
    void remember(double loss) {
        recent_.push_back(loss);
        if ((int)recent_.size() > c_.window) recent_.pop_front();
    }

    void judge_pending(int64_t step, double loss, std::vector<Alert>& out) {
        const double up = pending_, max = pending_max_;
        pending_ = NAN;
        if (loss > max + c_.margin) {
            alerted_ = true;
            out.push_back(make_alert(
                "loss_jump", "warning", step,
                fmt::format("loss {:.4g} is {:.2f} nats above its maximum of the last {} steps ({:.4g}), and has been "
                            "since step {} ({:.4g})",
                            loss, loss - max, c_.window, max, pending_step_, up),
                {{"loss", loss}, {"recent_max", max}, {"window", c_.window}, {"since_step", pending_step_}}));
            remember(up);
            remember(loss);
            return;
        }
        out.push_back(make_alert(
            "loss_jump", "info", pending_step_,
            fmt::format("a one-step loss outlier: {:.4g} is {:.2f} nats above the maximum of the {} steps before "
                        "({:.4g}), and the next step is back at {:.4g}",
                        up, up - max, c_.window, max, loss),
            {{"loss", up}, {"recent_max", max}, {"window", c_.window}, {"next_loss", loss}, {"outlier", true}}));
        remember(loss);  // the outlier stays out of the window: it would mask a real jump for `window` steps
    }

    LossJumpConfig c_;
    std::deque<double> recent_;
    bool alerted_ = false;
    double pending_ = NAN, pending_max_ = NAN;  // a loss over the margin, judged at the next step
    int64_t pending_step_ = 0;
};

}  // namespace

Registration registered::loss_jump(const DetectorsConfig& c) {
    return {"loss_jump", {"loss"}, {}, std::make_unique<LossJump>(c.loss_jump), c.loss_jump.policy};
}

}  // namespace hlat::detectors
