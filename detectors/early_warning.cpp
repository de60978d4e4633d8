#include "detectors/early_warning.h"

#include "detectors/detector_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

double median(std::vector<double> xs) {
    if (xs.empty()) return NAN;
    const size_t mid = xs.size() / 2;
    std::nth_element(xs.begin(), xs.begin() + (long)mid, xs.end());
    return xs[mid];
}

// When each element first crossed a watch level on its way to the alert's
// bound: what says which layer or head moved first. Forgotten when the
// episode ends.
class FirstCrossing {
  public:
    void observe(const VectorValue& v, int64_t step, double level, bool upward) {
        for (size_t i = 0; i < v.values.size(); i++) {
            const double x = v.values[i];
            if (std::isfinite(x) && (upward ? x > level : x < level)) first_.emplace(v.label(i), step);
        }
    }
    // The earliest crossing, ties to the name first in order; nullopt while none.
    std::optional<std::pair<std::string, int64_t>> first() const {
        std::optional<std::pair<std::string, int64_t>> out;
        for (const auto& [label, step] : first_)
            if (!out || step < out->second) out = {label, step};
        return out;
    }
    void clear() { first_.clear(); }
    json state() const { return first_; }
    void restore(const json& j) { first_ = j.get<std::map<std::string, int64_t>>(); }

  private:
    std::map<std::string, int64_t> first_;
};

// The element with the largest (or smallest) value, and how many are past
// `bound`. NaN is no value; an infinite one is past any bound.
struct Extreme {
    size_t index = 0;
    double value = NAN;
    int past = 0;
};
Extreme extreme_of(const VectorValue& v, double bound, bool upward) {
    Extreme e;
    for (size_t i = 0; i < v.values.size(); i++) {
        const double x = v.values[i];
        if (std::isnan(x)) continue;
        if (upward ? x > bound : x < bound) e.past++;
        if (std::isnan(e.value) || (upward ? x > e.value : x < e.value)) e.index = i, e.value = x;
    }
    return e;
}

// How much larger than now the learning rate will still get, raised to
// `exponent`: 1 when the step has no lr_max_ahead (a client that does not
// know its schedule), when the rate only falls from here, or with exponent 0.
double schedule_growth(const StepView& s, double exponent) {
    const double lr = s.value("lr"), ahead = s.value("lr_max_ahead");
    if (exponent <= 0 || !(lr > 0) || !(ahead > lr) || !std::isfinite(ahead)) return 1.0;
    return std::pow(ahead / lr, exponent);
}

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

// Every tensor's update-to-weight ratio against its own recent median.
class UpdateRatio : public Detector {
  public:
    explicit UpdateRatio(const UpdateRatioConfig& c) : c_(c) {}

    void observe(const StepView& s, std::vector<Alert>& out) override {
        const VectorValue* v = s.vector("update_ratio");
        if (!v) return;
        if (recent_.size() != v->values.size()) recent_.assign(v->values.size(), {});
        std::vector<double> jumps(v->values.size(), NAN);
        if (seen_++ >= c_.warmup_steps)
            for (size_t i = 0; i < jumps.size(); i++) jumps[i] = jump_of(i, v->values[i]);
        remember(*v);
        std::vector<double> finite;
        for (double j : jumps)
            if (std::isfinite(j)) finite.push_back(j);
        if (finite.size() * 2 < jumps.size() || finite.empty()) return;  // most tensors have no history yet
        const double typical = median(finite);
        if (typical <= c_.jump) {
            active_ = false;
            return;
        }
        if (active_) return;
        active_ = true;
        const size_t most = (size_t)(std::max_element(jumps.begin(), jumps.end(), [](double a, double b) {
                                         return std::isnan(a) || (!std::isnan(b) && b > a);
                                     }) - jumps.begin());
        out.push_back(make_alert(
            "update_ratio", "warning", s.step,
            fmt::format("the update-to-weight ratio jumped {:.3g}x in one step (median over {} tensors, against each "
                        "one's median of the previous {} steps; the most: {} {:.3g}x, now {:.3g})",
                        typical, finite.size(), c_.window, v->label(most), jumps[most], v->values[most]),
            {{"jump", typical}, {"threshold", c_.jump}, {"tensor", v->label(most)}, {"tensor_jump", jumps[most]},
             {"ratio", v->values[most]}, {"tensors", finite.size()}}));
    }
    json state() const override {
        json recent = json::array();
        for (const auto& r : recent_) {
            json xs = json::array();
            for (double x : r) xs.push_back(number(x));
            recent.push_back(std::move(xs));
        }
        return {{"seen", seen_}, {"active", active_}, {"recent", std::move(recent)}};
    }
    void restore(const json& j) override {
        seen_ = j.at("seen").get<int64_t>();
        active_ = j.at("active").get<bool>();
        recent_.clear();
        for (const json& xs : j.at("recent")) {
            recent_.emplace_back();
            for (const json& x : xs) recent_.back().push_back(number(x));
        }
    }

  private:
    double jump_of(size_t i, double ratio) const {
        if ((int)recent_[i].size() < c_.window || !(ratio > 0) || !std::isfinite(ratio)) return NAN;
        const double before = median(std::vector<double>(recent_[i].begin(), recent_[i].end()));
        return before > 0 ? ratio / before : NAN;
    }
    void remember(const VectorValue& v) {
        for (size_t i = 0; i < v.values.size(); i++) {
            recent_[i].push_back(v.values[i]);
            if ((int)recent_[i].size() > c_.window) recent_[i].pop_front();
        }
    }
    UpdateRatioConfig c_;
    int64_t seen_ = 0;
    bool active_ = false;
    std::vector<std::deque<double>> recent_;  // per tensor, its last `window` ratios
};

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

std::unique_ptr<Detector> make_attention_logit(const AttentionLogitConfig& c) {
    // Watched from half the floor (which head moved first); a new episode
    // once every head is back below 0.8 x the bound in force (the bound, or
    // where the projection puts it).
    return std::make_unique<HeadBound>(HeadBound::Rule{"attention_logit", "attn_logit_max", "largest attention logit",
                                                       c.bound, c.floor / 2, 0.8, true, 0, c.floor, c.lr_exponent});
}

std::unique_ptr<Detector> make_attention_entropy(const AttentionEntropyConfig& c) {
    return std::make_unique<HeadBound>(HeadBound::Rule{"attention_entropy", "attn_entropy", "attention entropy",
                                                       c.floor, 4 * c.floor, 2.0, false, c.warmup_steps});
}

std::unique_ptr<Detector> make_update_ratio(const UpdateRatioConfig& c) { return std::make_unique<UpdateRatio>(c); }
std::unique_ptr<Detector> make_eps_regime(const EpsRegimeConfig& c) { return std::make_unique<EpsRegime>(c); }
std::unique_ptr<Detector> make_logz_drift(const LogzDriftConfig& c) { return std::make_unique<LogzDrift>(c); }

}  // namespace hlat::detectors
