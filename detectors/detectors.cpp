#include "detectors/detector.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

// JSON has no NaN: a detector's "nothing yet" travels as null.
json number(double x) { return std::isnan(x) ? json(nullptr) : json(x); }
double number(const json& j) { return j.is_null() ? NAN : j.get<double>(); }

json numbers(const std::deque<double>& xs) {
    json out = json::array();
    for (double x : xs) out.push_back(number(x));
    return out;
}

// The newest `keep` values: a window restored under a smaller configured size
// is cut to it.
std::deque<double> numbers(const json& j, size_t keep) {
    std::deque<double> out;
    for (const json& x : j) out.push_back(number(x));
    while (out.size() > keep) out.pop_front();
    return out;
}

}  // namespace

SpikeTracker::SpikeTracker(int window, SpikeRule rule, double threshold)
    : window_(window), rule_(rule), threshold_(threshold) {}

SpikeTracker::Observation SpikeTracker::observe(double g) {
    Observation o{};
    o.window_full = (int)recent_.size() == window_;
    double n = (double)recent_.size();
    o.mean = n ? std::accumulate(recent_.begin(), recent_.end(), 0.0) / n : NAN;
    bool spike = false;
    if (n > 0 && std::isfinite(g)) {
        switch (rule_) {
            case SpikeRule::Additive: spike = g > o.mean + threshold_; break;
            case SpikeRule::Ratio: spike = g > o.mean * threshold_; break;
            case SpikeRule::ZScore: {
                double var = 0.0;
                for (double x : recent_) var += (x - o.mean) * (x - o.mean);
                spike = g > o.mean + threshold_ * std::sqrt(var / n);
                break;
            }
        }
    }
    if (spike) {
        o.episode_start = length_ == 0;
        o.episode_length = ++length_;
        o.in_episode = true;
    } else {
        o.ended_length = length_;
        length_ = 0;
    }
    if (std::isfinite(g)) {
        recent_.push_back(g);
        if ((int)recent_.size() > window_) recent_.pop_front();
    }
    return o;
}

json SpikeTracker::state() const { return {{"recent", numbers(recent_)}, {"length", length_}}; }

void SpikeTracker::restore(const json& j) {
    recent_ = numbers(j.at("recent"), window_);
    length_ = j.at("length").get<int>();
}

std::map<int, long> spike_episode_lengths(const std::vector<double>& grad_norms, int window, SpikeRule rule,
                                          double threshold) {
    SpikeTracker tracker(window, rule, threshold);
    std::map<int, long> lengths;
    int open = 0;
    for (double g : grad_norms) {
        auto o = tracker.observe(g);
        if (o.ended_length) lengths[o.ended_length]++;
        open = o.episode_length;
    }
    if (open) lengths[open]++;
    return lengths;
}

namespace {

Alert make_alert(const char* kind, const char* severity, int64_t step, std::string message, json data) {
    return {kind, severity, step, std::move(message), data.dump(), 0.0};
}

class GradSpike : public Detector {
  public:
    explicit GradSpike(const GradSpikeConfig& c) : c_(c), tracker_(c.window, c.rule, c.threshold) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (!r.has_grad_norm) return;  // a record of other series (a held-out loss alone) is no step of this one
        SpikeTracker::Observation o = tracker_.observe(r.grad_norm);
        if (!o.in_episode) {
            alerted_ratio_ = alerted_length_ = false;
            return;
        }
        double ratio = r.grad_norm / o.mean;
        if (o.window_full && ratio > c_.alert_ratio && !alerted_ratio_) {
            alerted_ratio_ = true;
            out.push_back(make_alert(
                "grad_spike", "warning", r.step,
                fmt::format("gradient norm {:.4g} is {:.1f}x its mean of the last {} steps ({:.4g})", r.grad_norm,
                            ratio, c_.window, o.mean),
                {{"grad_norm", r.grad_norm}, {"mean", o.mean}, {"ratio", ratio}, {"window", c_.window}}));
        }
        if (o.episode_length >= c_.sustained_steps && !alerted_length_) {
            alerted_length_ = true;
            out.push_back(make_alert(
                "sustained_grad_spike", "critical", r.step,
                fmt::format("gradient norm has stayed above its running mean for {} steps: a sign of coming "
                            "divergence",
                            o.episode_length),
                {{"grad_norm", r.grad_norm}, {"mean", o.mean}, {"episode_steps", o.episode_length}}));
        }
    }

    json state() const override {
        return {{"tracker", tracker_.state()}, {"alerted_ratio", alerted_ratio_}, {"alerted_length", alerted_length_}};
    }
    void restore(const json& j) override {
        tracker_.restore(j.at("tracker"));
        alerted_ratio_ = j.at("alerted_ratio").get<bool>();
        alerted_length_ = j.at("alerted_length").get<bool>();
    }

  private:
    GradSpikeConfig c_;
    SpikeTracker tracker_;
    bool alerted_ratio_ = false, alerted_length_ = false;
};

class NonFinite : public Detector {
  public:
    explicit NonFinite(Source source) : source_(source) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        bool loss_bad = r.has_loss && !std::isfinite(r.loss);
        bool grad_bad = r.has_grad_norm && !std::isfinite(r.grad_norm);
        if (!loss_bad && !grad_bad) return;
        const char* what = loss_bad && grad_bad ? "loss and gradient norm are" : loss_bad ? "loss is" : "gradient norm is";
        std::string consequence = source_ == Source::Embedded ? "the update of this step was skipped"
                                                              : "the trainer reported a non-finite value";
        out.push_back(make_alert("nonfinite", "critical", r.step,
                                 fmt::format("{} not finite (loss {}, grad norm {}); {}", what, r.loss, r.grad_norm,
                                             consequence),
                                 {{"loss", std::isfinite(r.loss) ? json(r.loss) : json(fmt::format("{}", r.loss))},
                                  {"grad_norm", std::isfinite(r.grad_norm) ? json(r.grad_norm)
                                                                           : json(fmt::format("{}", r.grad_norm))}}));
    }

  private:
    Source source_;
};

class LossFloor : public Detector {
  public:
    explicit LossFloor(const LossFloorConfig& c) : c_(c) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (std::isfinite(r.heldout_loss)) heldout_ = r.heldout_loss;
        if (!std::isfinite(r.loss)) return;
        ema_ = std::isnan(ema_) ? r.loss : 0.9 * ema_ + 0.1 * r.loss;
        bool below_floor = ema_ < c_.floor;
        if (below_floor && !floor_alerted_) {
            floor_alerted_ = true;
            out.push_back(make_alert(
                "loss_floor", "critical", r.step,
                fmt::format("training loss has slid to {:.4g} nats, below the floor of {:.4g}: is the model seeing "
                            "the tokens it predicts?",
                            ema_, c_.floor),
                {{"smoothed_loss", ema_}, {"floor", c_.floor}}));
        }
        if (!below_floor) floor_alerted_ = false;
        bool below_heldout = std::isfinite(heldout_) && ema_ < heldout_ - c_.heldout_gap;
        gap_steps_ = below_heldout ? gap_steps_ + 1 : 0;
        if (gap_steps_ >= c_.heldout_gap_steps && !gap_alerted_) {
            gap_alerted_ = true;
            out.push_back(make_alert(
                "loss_below_heldout", "warning", r.step,
                fmt::format("training loss {:.4g} is {:.2f} nats below the held-out loss {:.4g}, and has been more "
                            "than {:.4g} below it for {} steps",
                            ema_, heldout_ - ema_, heldout_, c_.heldout_gap, gap_steps_),
                {{"smoothed_loss", ema_}, {"heldout_loss", heldout_}, {"gap", c_.heldout_gap}, {"steps", gap_steps_}}));
        }
        if (!below_heldout) gap_alerted_ = false;
    }

    json state() const override {
        return {{"ema", number(ema_)}, {"heldout", number(heldout_)}, {"floor_alerted", floor_alerted_},
                {"gap_alerted", gap_alerted_}, {"gap_steps", gap_steps_}};
    }
    void restore(const json& j) override {
        ema_ = number(j.at("ema"));
        heldout_ = number(j.at("heldout"));
        floor_alerted_ = j.at("floor_alerted").get<bool>();
        gap_alerted_ = j.at("gap_alerted").get<bool>();
        gap_steps_ = j.value("gap_steps", 0);  // absent from the state of checkpoints before it counted
    }

  private:
    LossFloorConfig c_;
    double ema_ = NAN, heldout_ = NAN;
    bool floor_alerted_ = false, gap_alerted_ = false;
    int gap_steps_ = 0;  // steps in a row below the held-out loss by more than the gap
};

class LossJump : public Detector {
  public:
    explicit LossJump(const LossJumpConfig& c) : c_(c) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (!std::isfinite(r.loss)) return;
        if ((int)recent_.size() == c_.window) {
            double max = *std::max_element(recent_.begin(), recent_.end());
            bool jump = r.loss > max + c_.margin;
            if (jump && !alerted_) {
                alerted_ = true;
                out.push_back(make_alert(
                    "loss_jump", "warning", r.step,
                    fmt::format("loss {:.4g} is {:.2f} nats above its maximum of the last {} steps ({:.4g})", r.loss,
                                r.loss - max, c_.window, max),
                    {{"loss", r.loss}, {"recent_max", max}, {"window", c_.window}}));
            }
            if (!jump) alerted_ = false;
        }
        recent_.push_back(r.loss);
        if ((int)recent_.size() > c_.window) recent_.pop_front();
    }

    json state() const override { return {{"recent", numbers(recent_)}, {"alerted", alerted_}}; }
    void restore(const json& j) override {
        recent_ = numbers(j.at("recent"), c_.window);
        alerted_ = j.at("alerted").get<bool>();
    }

  private:
    LossJumpConfig c_;
    std::deque<double> recent_;
    bool alerted_ = false;
};

class Divergence : public Detector {
  public:
    explicit Divergence(const DivergenceConfig& c) : c_(c), alpha_(2.0 / (c.window / 4.0 + 1.0)) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) return;
        grad_ = std::isnan(grad_) ? r.grad_norm : (1 - alpha_) * grad_ + alpha_ * r.grad_norm;
        loss_ = std::isnan(loss_) ? r.loss : (1 - alpha_) * loss_ + alpha_ * r.loss;
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
                "divergence", "critical", r.step,
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

class TpDrift : public Detector {
  public:
    explicit TpDrift(const TpDriftConfig& c) : c_(c) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (std::isnan(r.tp_drift)) return;
        growing_ = !recent_.empty() && r.tp_drift > recent_.back() ? growing_ + 1 : 0;
        recent_.push_back(r.tp_drift);
        if ((int)recent_.size() > c_.growth_checks + 1) recent_.pop_front();
        bool above = r.tp_drift > c_.threshold;
        bool steady_growth = growing_ >= c_.growth_checks;
        if ((above || steady_growth) && !alerted_) {
            alerted_ = true;
            std::string why = above ? fmt::format("above the threshold {:.3g}", c_.threshold)
                                    : fmt::format("growing at each of the last {} checks", c_.growth_checks);
            out.push_back(make_alert(
                "tp_drift", "warning", r.step,
                fmt::format("replicated norm weights drifted apart across tensor-parallel ranks: max |w - w_tp0| = "
                            "{:.3g}, {} (stochastic rounding keyed by rank? re-sync with parallel.resync_every)",
                            r.tp_drift, why),
                {{"tp_drift", r.tp_drift}, {"threshold", c_.threshold}, {"growing_checks", growing_}}));
        }
        if (!above && !steady_growth) alerted_ = false;
    }

    json state() const override {
        return {{"recent", numbers(recent_)}, {"growing", growing_}, {"alerted", alerted_}};
    }
    void restore(const json& j) override {
        recent_ = numbers(j.at("recent"), c_.growth_checks + 1);
        growing_ = j.at("growing").get<int>();
        alerted_ = j.at("alerted").get<bool>();
    }

  private:
    TpDriftConfig c_;
    std::deque<double> recent_;
    int growing_ = 0;
    bool alerted_ = false;
};

class ReplicaMismatch : public Detector {
  public:
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (std::isnan(r.replica_mismatch)) return;
        bool bad = r.replica_mismatch > 0;
        if (bad && !alerted_) {
            alerted_ = true;
            std::string detail = r.replica_detail.empty()
                                     ? fmt::format("data-parallel replicas disagree: {:.0f} rank(s) differ from their "
                                                   "replica 0",
                                                   r.replica_mismatch)
                                     : r.replica_detail;
            out.push_back(make_alert("replica_mismatch", "critical", r.step,
                                     detail + " (a gradient all-reduce bug: the replicas now train different models)",
                                     {{"mismatched_ranks", r.replica_mismatch}}));
        }
        if (!bad) alerted_ = false;
    }
    json state() const override { return {{"alerted", alerted_}}; }
    void restore(const json& j) override { alerted_ = j.at("alerted").get<bool>(); }

  private:
    bool alerted_ = false;
};

class Straggler : public Detector {
  public:
    explicit Straggler(const StragglerConfig& c) : c_(c) {}
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (std::isnan(r.straggler_ratio) || r.step < c_.warmup) return;
        const bool slow = r.straggler_ratio > c_.factor;
        run_ = slow && r.straggler_rank == rank_ ? run_ + 1 : slow ? 1 : 0;
        rank_ = slow ? r.straggler_rank : -1;
        if (run_ == c_.steps)
            out.push_back(make_alert(
                "straggler", "warning", r.step,
                fmt::format("rank {:.0f} is a straggler: its compute took {:.1f}x the median of the other ranks' for "
                            "{} consecutive steps{}; every other rank waits for it at each all-reduce",
                            r.straggler_rank, r.straggler_ratio, c_.steps,
                            r.straggler_detail.empty() ? "" : " (" + r.straggler_detail + ")"),
                {{"rank", r.straggler_rank}, {"ratio", r.straggler_ratio}, {"steps", c_.steps}}));
    }
    json state() const override { return {{"rank", rank_}, {"run", run_}}; }
    void restore(const json& j) override {
        rank_ = j.at("rank").get<double>();
        run_ = j.at("run").get<int>();
    }

  private:
    StragglerConfig c_;
    double rank_ = -1;
    int run_ = 0;  // consecutive slow steps of rank_
};

class HealthCheck : public Detector {
  public:
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (!(r.health_check_failures > 0)) return;  // NaN: not checked at this step
        out.push_back(make_alert("health_check", "critical", r.step,
                                 (r.health_detail.empty() ? fmt::format("{:.0f} rank(s) computed wrong numbers",
                                                                        r.health_check_failures)
                                                          : r.health_detail) +
                                     " in the health check (silent data corruption: its GEMMs are wrong, and so is "
                                     "what it contributes to training)",
                                 {{"ranks", r.health_check_failures}}));
    }
};

class InformationLeak : public Detector {
  public:
    void observe(const StepRecord& r, std::vector<Alert>& out) override {
        if (!(r.causality_leak > 0)) return;  // NaN: not probed at this step
        out.push_back(make_alert(
            "information_leak", "critical", r.step,
            fmt::format("causality probe: logits at early positions changed (by up to {:.3g}) when only later tokens "
                        "changed: the model sees the future (check the attention mask)",
                        r.causality_leak),
            {{"max_logit_difference", r.causality_leak}}));
    }
};

}  // namespace

static const std::map<std::string, double StepRecord::*>& metric_fields() {
    static const std::map<std::string, double StepRecord::*> fields = {
        {"loss", &StepRecord::loss},
        {"grad_norm", &StepRecord::grad_norm},
        {"param_norm", &StepRecord::param_norm},
        {"lr", &StepRecord::lr},
        {"heldout_loss", &StepRecord::heldout_loss},
        {"tp_drift", &StepRecord::tp_drift},
        {"replica_mismatch", &StepRecord::replica_mismatch},
        {"causality_leak", &StepRecord::causality_leak},
        {"straggler_ratio", &StepRecord::straggler_ratio},
        {"straggler_rank", &StepRecord::straggler_rank},
        {"health_check_failures", &StepRecord::health_check_failures},
    };
    return fields;
}

bool apply_metric(StepRecord& r, const std::string& key, double value) {
    auto it = metric_fields().find(key);
    if (it == metric_fields().end()) return false;
    r.*(it->second) = value;
    if (key == "loss") r.has_loss = true;
    if (key == "grad_norm") r.has_grad_norm = true;
    return true;
}

void merge_step(StepRecord& into, const StepRecord& later) {
    for (const auto& [key, field] : metric_fields()) {
        bool reported = key == "loss" ? later.has_loss : key == "grad_norm" ? later.has_grad_norm
                                                                           : !std::isnan(later.*field);
        if (reported) apply_metric(into, key, later.*field);
    }
    if (!later.replica_detail.empty()) into.replica_detail = later.replica_detail;
}

const std::vector<std::string>& detector_keys() {
    static const std::vector<std::string> keys = {"loss", "grad_norm", "param_norm", "lr", "heldout_loss",
                                                  "tp_drift", "replica_mismatch", "causality_leak",
                                                  "straggler_ratio", "straggler_rank", "health_check_failures"};
    return keys;
}

DetectorSuite::DetectorSuite(const DetectorsConfig& c, Source source) {
    auto add = [&](const char* name, std::unique_ptr<Detector> d, Policy p) {
        if (p != Policy::Off) detectors_.push_back({name, std::move(d), p});
    };
    add("nonfinite", std::make_unique<NonFinite>(source), c.nonfinite.policy);
    add("grad_spike", std::make_unique<GradSpike>(c.grad_spike), c.grad_spike.policy);
    add("loss_floor", std::make_unique<LossFloor>(c.loss_floor), c.loss_floor.policy);
    add("loss_jump", std::make_unique<LossJump>(c.loss_jump), c.loss_jump.policy);
    add("divergence", std::make_unique<Divergence>(c.divergence), c.divergence.policy);
    add("tp_drift", std::make_unique<TpDrift>(c.tp_drift), c.tp_drift.policy);
    add("replica_mismatch", std::make_unique<ReplicaMismatch>(), c.replica_mismatch.policy);
    add("straggler", std::make_unique<Straggler>(c.straggler), c.straggler.policy);
    add("health_check", std::make_unique<HealthCheck>(), c.health_check.policy);
    // The embedded trainer raises information_leak from its own probe; this
    // one reads probes sent from outside (no series in the trainer's runs).
    add("information_leak", std::make_unique<InformationLeak>(), c.leak_probe.policy);
}

DetectorSuite::~DetectorSuite() = default;

std::vector<Fired> DetectorSuite::observe(const StepRecord& r) {
    std::vector<Fired> out;
    for (Entry& e : detectors_) {
        std::vector<Alert> alerts;
        e.detector->observe(r, alerts);
        for (Alert& a : alerts) out.push_back({std::move(a), e.policy});
    }
    return out;
}

json DetectorSuite::state() const {
    json out = json::object();
    for (const Entry& e : detectors_) {
        json s = e.detector->state();
        if (!s.is_null()) out[e.name] = std::move(s);
    }
    return out;
}

void DetectorSuite::restore(const json& state) {
    for (Entry& e : detectors_)
        if (state.contains(e.name)) e.detector->restore(state.at(e.name));
}

}  // namespace hlat::detectors
