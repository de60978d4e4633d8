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

// The grad norm's trend growing while the loss's does not fall.
class Divergence : public Detector {
  public:
    explicit Divergence(const DivergenceConfig& c) : c_(c), alpha_(2.0 / (c.window / 4.0 + 1.0)) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double loss = s.value("loss"), grad_norm = s.value("grad_norm");
        if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return;
        grad_ = std::isnan(grad_) ? grad_norm : (1 - alpha_) * grad_ + alpha_ * grad_norm;
        loss_ = std::isnan(loss_) ? loss : (1 - alpha_) * loss_ + alpha_ * loss;
        history_.push_back({grad_, loss_});
        if ((int)history_.size() <= c_.window) return;
        history_.pop_front();
        // Only once the trends have had a window to settle.
        if (++seen_ < c_.window) return;
        auto [grad_then, loss_then] = history_.front();
        bool diverging = grad_ > c_.grad_growth * grad_then && loss_then - loss_ <= c_.min_loss_drop;
        if (diverging && !alerted_) {
            alerted_ = true;
            out.push_back(make_alert(
                "divergence", "critical", s.step,
                fmt::format("gradient norm trend grew {:.1f}x over {} steps ({:.4g} to {:.4g}) while the loss trend "
                            "went from {:.4g} to {:.4g}",
                            grad_ / grad_then, c_.window, grad_then, grad_, loss_then, loss_),
                {{"grad_trend_then", grad_then}, {"grad_trend_now", grad_}, {"loss_trend_then", loss_then},
                 {"loss_trend_now", loss_}, {"window", c_.window}}));
        }
        if (!diverging) alerted_ = false;
    }

    json state() const override {
        json history = json::array();
        for (auto [grad, loss] : history_) history.push_back({number(grad), number(loss)});
        return {{"grad", number(grad_)}, {"loss", number(loss_)}, {"history", history}, {"seen", seen_},
                {"alerted", alerted_}};
    }
    void restore(const json& j) override {
        grad_ = number(j.at("grad"));
        loss_ = number(j.at("loss"));
        history_.clear();
        for (const json& h : j.at("history")) history_.push_back({number(h.at(0)), number(h.at(1))});
        while ((int)history_.size() > c_.window + 1) history_.pop_front();
        seen_ = j.at("seen").get<int>();
        alerted_ = j.at("alerted").get<bool>();
    }

  private:
    DivergenceConfig c_;
    double alpha_;
    double grad_ = NAN, loss_ = NAN;
    std::deque<std::pair<double, double>> history_;
    int seen_ = 0;
    bool alerted_ = false;
};

}  // namespace

Registration registered::divergence(const DetectorsConfig& c) {
    return {"divergence", {"loss", "grad_norm"}, {}, std::make_unique<Divergence>(c.divergence), c.divergence.policy};
}

}  // namespace hlat::detectors
