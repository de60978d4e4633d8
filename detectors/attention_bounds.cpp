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

// A per-head bound, crossed upward (largest attention logit) or downward
// (attention entropy): one alert per episode, naming the head and the head
// that crossed the watch level first. An upward rule with a floor also
// fires when a head past the floor, projected to the schedule's largest rate
// ahead, passes the bound.
class HeadBound : public Detector {
  public:
    struct Rule {
        const char* kind;
        const char* key;
        const char* what;  // "largest attention logit"
        double bound, watch;
        double rearm;  // times the bound in force: a new episode once every head is back past it
        bool upward;
        int warmup_steps;
        double floor = NAN, lr_exponent = 0;  // the projection (NaN floor: none)
    };
    explicit HeadBound(Rule r) : r_(r) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const VectorValue* v = s.vector(r_.key);
        if (!v || seen_++ < r_.warmup_steps) return;
        const double growth = std::isnan(r_.floor) ? 1.0 : schedule_growth(s, r_.lr_exponent);
        // A head is past the bound when its projection is: the floor over
        // the growth, or the bound itself when the floor is higher.
        const double bound = growth > 1.0 ? std::min(r_.bound, std::max(r_.floor, r_.bound / growth)) : r_.bound;
        const Extreme e = extreme_of(*v, bound, r_.upward);
        if (std::isnan(e.value)) return;
        if (active_) {
            const double rearm = r_.rearm * bound;
            if (r_.upward ? e.value < rearm : e.value > rearm) active_ = false, moved_.clear();
            return;
        }
        moved_.observe(*v, s.step, r_.watch, r_.upward);
        if (e.past == 0) return;
        active_ = true;
        out.push_back(alert(s, *v, e, growth));
    }
    json state() const override { return {{"seen", seen_}, {"active", active_}, {"moved", moved_.state()}}; }
    void restore(const json& j) override {
        seen_ = j.at("seen").get<int64_t>();
        active_ = j.at("active").get<bool>();
        moved_.restore(j.at("moved"));
    }

  private:
    Alert alert(const StepView& s, const VectorValue& v, const Extreme& e, double growth) const {
        const std::string head = v.label(e.index);
        const auto first = moved_.first();
        const double projected = e.value * growth;
        const bool on_projection = r_.upward && e.value <= r_.bound;  // not past the bound itself
        // Heads past the bound itself, or past the floor and projected past it.
        const int past = on_projection ? e.past : extreme_of(v, r_.bound, r_.upward).past;
        json data = {{"head", head}, {"value", e.value}, {"bound", r_.bound}, {"heads_past", past},
                     {"heads", v.values.size()}};
        std::string why = fmt::format("{}: {} {:.4g} {} {:.4g}", head, r_.what, e.value,
                                      r_.upward ? "above" : "below", r_.bound);
        if (on_projection) {
            data["projected"] = projected, data["lr"] = s.value("lr"), data["lr_max_ahead"] = s.value("lr_max_ahead");
            why = fmt::format("{}: {} {:.4g} at lr {:.3g}; the schedule climbs to {:.3g}, where it projects to {:.4g} "
                              "(as lr^{:.3g}), above {:.4g}",
                              head, r_.what, e.value, s.value("lr"), s.value("lr_max_ahead"), projected,
                              r_.lr_exponent, r_.bound);
        }
        std::string since;
        if (first) {
            data["first_moved"] = first->first, data["first_moved_step"] = first->second;
            since = fmt::format("; the first past {:.3g}: {} at step {}", r_.watch, first->first, first->second);
        }
        return make_alert(r_.kind, "warning", s.step,
                          fmt::format("{} ({} of {} heads){}", why, past, v.values.size(), since), data);
    }

    Rule r_;
    int64_t seen_ = 0;
    bool active_ = false;
    FirstCrossing moved_;
};

}  // namespace

Registration registered::attention_logit(const DetectorsConfig& c) {
    return {"attention_logit", {"attn_logit_max", "lr", "lr_max_ahead"}, {},
            // Watched from half the floor (which head moved first); a new episode
            // once every head is back below 0.8 x the bound in force (the bound, or
            // where the projection puts it).
            std::make_unique<HeadBound>(HeadBound::Rule{"attention_logit", "attn_logit_max", "largest attention logit",
                                                        c.attention_logit.bound, c.attention_logit.floor / 2, 0.8, true,
                                                        0, c.attention_logit.floor, c.attention_logit.lr_exponent}),
            c.attention_logit.policy};
}

Registration registered::attention_entropy(const DetectorsConfig& c) {
    return {"attention_entropy", {"attn_entropy"}, {},
            std::make_unique<HeadBound>(HeadBound::Rule{"attention_entropy", "attn_entropy", "attention entropy",
                                                        c.attention_entropy.floor, 4 * c.attention_entropy.floor, 2.0,
                                                        false, c.attention_entropy.warmup_steps}),
            c.attention_entropy.policy};
}

}  // namespace hlat::detectors
