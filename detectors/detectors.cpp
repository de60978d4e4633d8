#include "detectors/detector.h"

#include "detectors/detector_util.h"
#include "detectors/early_warning.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <set>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

namespace {

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

class GradSpike : public Detector {
  public:
    explicit GradSpike(const GradSpikeConfig& c) : c_(c), tracker_(c.window, c.rule, c.threshold) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        if (!s.has("grad_norm")) return;  // a step of other series (a held-out loss alone) is no step of this one
        const double grad_norm = s.value("grad_norm");
        if (std::isfinite(grad_norm)) seen_++;
        SpikeTracker::Observation o = tracker_.observe(grad_norm);
        if (!o.in_episode) {
            alerted_ratio_ = alerted_length_ = false;
            return;
        }
        double ratio = grad_norm / o.mean;
        const double alert_ratio = seen_ <= c_.warmup_steps ? c_.warmup_alert_ratio : c_.alert_ratio;
        if (o.window_full && ratio > alert_ratio && !alerted_ratio_) {
            alerted_ratio_ = true;
            out.push_back(make_alert(
                "grad_spike", "warning", s.step,
                fmt::format("gradient norm {:.4g} is {:.1f}x its mean of the last {} steps ({:.4g})", grad_norm,
                            ratio, c_.window, o.mean),
                {{"grad_norm", grad_norm}, {"mean", o.mean}, {"ratio", ratio}, {"window", c_.window}}));
        }
        if (o.episode_length >= c_.sustained_steps && !alerted_length_) {
            alerted_length_ = true;
            out.push_back(make_alert(
                "sustained_grad_spike", "critical", s.step,
                fmt::format("gradient norm has stayed above its running mean for {} steps: a sign of coming "
                            "divergence",
                            o.episode_length),
                {{"grad_norm", grad_norm}, {"mean", o.mean}, {"episode_steps", o.episode_length}}));
        }
    }

    json state() const override {
        return {{"tracker", tracker_.state()}, {"alerted_ratio", alerted_ratio_}, {"alerted_length", alerted_length_},
                {"seen", seen_}};
    }
    void restore(const json& j) override {
        tracker_.restore(j.at("tracker"));
        seen_ = j.value("seen", (int64_t)c_.warmup_steps + 1);  // a state saved before it counted: past warm-up
        alerted_ratio_ = j.at("alerted_ratio").get<bool>();
        alerted_length_ = j.at("alerted_length").get<bool>();
    }

  private:
    GradSpikeConfig c_;
    SpikeTracker tracker_;
    bool alerted_ratio_ = false, alerted_length_ = false;
    int64_t seen_ = 0;  // finite gradient norms so far: the first warmup_steps are judged by warmup_alert_ratio
};

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

class TpDrift : public Detector {
  public:
    explicit TpDrift(const TpDriftConfig& c) : c_(c) {}
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double drift = s.value("tp_drift");
        if (std::isnan(drift)) return;
        growing_ = !recent_.empty() && drift > recent_.back() ? growing_ + 1 : 0;
        recent_.push_back(drift);
        if ((int)recent_.size() > c_.growth_checks + 1) recent_.pop_front();
        bool above = drift > c_.threshold;
        bool steady_growth = growing_ >= c_.growth_checks;
        if ((above || steady_growth) && !alerted_) {
            alerted_ = true;
            std::string why = above ? fmt::format("above the threshold {:.3g}", c_.threshold)
                                    : fmt::format("growing at each of the last {} checks", c_.growth_checks);
            // Where: the trainer's note of the most drifted tensor and rank, when it sent one.
            const std::string where = s.detail("tp_drift");
            out.push_back(make_alert(
                "tp_drift", "warning", s.step,
                fmt::format("replicated weights drifted apart across tensor-parallel ranks{}: max |w - w_ref| = "
                            "{:.3g}, {} (stochastic rounding keyed by rank? re-sync with parallel.resync_every)",
                            where.empty() ? "" : ", most in " + where, drift, why),
                {{"tp_drift", drift}, {"threshold", c_.threshold}, {"growing_checks", growing_}, {"where", where}}));
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
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double mismatched = s.value("replica_mismatch");
        if (std::isnan(mismatched)) return;
        bool bad = mismatched > 0;
        if (bad && !alerted_) {
            alerted_ = true;
            std::string detail = s.detail("replica_mismatch");
            if (detail.empty())
                detail = fmt::format("data-parallel replicas disagree: {:.0f} rank(s) differ from their replica 0",
                                     mismatched);
            out.push_back(make_alert("replica_mismatch", "critical", s.step,
                                     detail + " (a gradient all-reduce bug: the replicas now train different models)",
                                     {{"mismatched_ranks", mismatched}}));
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
    void observe(const StepView& s, std::vector<Alert>& out) override {
        const double ratio = s.value("straggler_ratio"), rank = s.value("straggler_rank");
        if (std::isnan(ratio) || s.step < c_.warmup) return;
        const bool slow = ratio > c_.factor;
        run_ = slow && rank == rank_ ? run_ + 1 : slow ? 1 : 0;
        rank_ = slow ? rank : -1;
        if (run_ != c_.steps) return;
        const double compute = s.value("straggler_compute_s");
        out.push_back(make_alert(
            "straggler", "warning", s.step,
            fmt::format("rank {:.0f} is a straggler: its compute took {:.1f}x the median of the other ranks' for {} "
                        "consecutive steps{}; every other rank waits for it at each all-reduce",
                        rank, ratio, c_.steps,
                        std::isnan(compute) ? "" : fmt::format(" ({:.3f} s a step)", compute)),
            {{"rank", rank}, {"ratio", ratio}, {"steps", c_.steps}}));
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

// A trainer's own alerts (the client's run.alert, JSONL "alert" lines:
// telemetry/ingest.h), one for each "alert" event of the step, its detail's
// title, text and level read only where each is a string, cut to size, the
// level info, warning or critical (else warning); the same line twice at a
// step is one alert. A detector like the others,
// so a stored run replayed raises them as the live one did.
class TrainerAlert : public Detector {
  public:
    void observe(const StepView& s, std::vector<Alert>& out) override {
        std::set<std::string> said;  // a line sent again (and stored again) is one alert
        for (const telemetry::Event& e : s.events)
            if (e.kind == "alert" && said.insert(e.detail).second) out.push_back(alert_of(e));
    }

  private:
    static Alert alert_of(const telemetry::Event& e) {
        json d = json::parse(e.detail, nullptr, false);
        auto text = [&](const char* key, const char* otherwise, size_t limit) {
            return d.is_object() && d.contains(key) && d[key].is_string() ? d[key].get<std::string>().substr(0, limit)
                                                                            : std::string(otherwise);
        };
        const std::string title = text("title", "alert", 200), body = text("text", "", 10000);
        std::string level = text("level", "warning", 20);
        if (level != "info" && level != "critical") level = "warning";
        return make_alert("alert", level.c_str(), e.step, body.empty() ? title : title + ": " + body,
                          {{"title", title}, {"text", body}, {"level", level}});
    }
};

}  // namespace

// The detectors, each with the keys and event kinds it reads: the one list
// that says which of a run's points the detectors see (a stored run is
// replayed by reading these keys, a run none of whose keys is here is
// reported as unwatched). The policy of information_leak is leak_probe's.
DetectorSuite::DetectorSuite(const DetectorsConfig& c) {
    auto add = [&](const char* name, std::vector<std::string> keys, std::vector<std::string> events,
                   std::unique_ptr<Detector> d, Policy p) {
        if (p == Policy::Off) return;
        for (std::string& k : keys)
            if (!reads(k)) keys_.push_back(std::move(k));
        for (std::string& e : events)
            if (!reads_event(e)) event_kinds_.push_back(std::move(e));
        detectors_.push_back({name, std::move(d), p});
    };
    add("nonfinite", {"loss", "grad_norm", "update_skipped"}, {}, std::make_unique<NonFinite>(), c.nonfinite.policy);
    add("grad_spike", {"grad_norm"}, {}, std::make_unique<GradSpike>(c.grad_spike), c.grad_spike.policy);
    add("loss_floor", {"loss", "heldout_loss"}, {}, std::make_unique<LossFloor>(c.loss_floor), c.loss_floor.policy);
    add("loss_jump", {"loss"}, {}, std::make_unique<LossJump>(c.loss_jump), c.loss_jump.policy);
    add("divergence", {"loss", "grad_norm"}, {}, std::make_unique<Divergence>(c.divergence), c.divergence.policy);
    add("tp_drift", {"tp_drift"}, {"tp_drift"}, std::make_unique<TpDrift>(c.tp_drift), c.tp_drift.policy);
    add("replica_mismatch", {"replica_mismatch"}, {"replica_mismatch"}, std::make_unique<ReplicaMismatch>(),
        c.replica_mismatch.policy);
    add("straggler", {"straggler_ratio", "straggler_rank", "straggler_compute_s"}, {},
        std::make_unique<Straggler>(c.straggler), c.straggler.policy);
    add("health_check", {"health_check_failures"}, {"health_check"}, std::make_unique<HealthCheck>(),
        c.health_check.policy);
    add("information_leak", {"causality_leak"}, {}, std::make_unique<InformationLeak>(), c.leak_probe.policy);
    add("trainer_alert", {}, {"alert"}, std::make_unique<TrainerAlert>(), Policy::Warn);  // the trainer's own say
    add("attention_logit", {"attn_logit_max", "lr", "lr_max_ahead"}, {}, make_attention_logit(c.attention_logit),
        c.attention_logit.policy);
    add("attention_entropy", {"attn_entropy"}, {}, make_attention_entropy(c.attention_entropy),
        c.attention_entropy.policy);
    add("update_ratio", {"update_ratio"}, {}, make_update_ratio(c.update_ratio), c.update_ratio.policy);
    add("eps_regime", {"eps_share"}, {}, make_eps_regime(c.eps_regime), c.eps_regime.policy);
    add("logz_drift", {"logz_mean"}, {}, make_logz_drift(c.logz_drift), c.logz_drift.policy);
}

bool DetectorSuite::reads(const std::string& key) const {
    return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

bool DetectorSuite::reads_event(const std::string& kind) const {
    return std::find(event_kinds_.begin(), event_kinds_.end(), kind) != event_kinds_.end();
}

DetectorSuite::~DetectorSuite() = default;

// A note (severity info) halts nothing, with one exception: a one-step loss
// outlier is the signature of a bad batch (the model is back to normal at the
// next step), which is exactly what rewind_skip exists to skip.
static Policy policy_for(const Alert& a, Policy configured) {
    if (a.severity != "info" || configured == Policy::Warn) return configured;
    if (configured == Policy::RewindSkip && a.kind == "loss_jump") return configured;
    return Policy::Warn;
}

std::vector<Fired> DetectorSuite::observe(const StepView& s) {
    std::vector<Fired> out;
    for (Entry& e : detectors_) {
        std::vector<Alert> alerts;
        e.detector->observe(s, alerts);
        for (Alert& a : alerts) {
            const Policy p = policy_for(a, e.policy);
            out.push_back({std::move(a), p});
        }
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
