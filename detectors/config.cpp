#include "detectors/config.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace hlat::detectors {
namespace {

using json = nlohmann::json;

// Reads one detector's object, remembering the keys it consumed.
class Fields {
  public:
    Fields(const json& parent, const std::string& name) : name_(name) {
        if (!parent.contains(name)) return;
        obj_ = &parent.at(name);
        if (!obj_->is_object()) fail("", *obj_, "an object");
    }
    void policy(Policy& out) {
        const json* v = get("policy");
        if (!v) return;
        std::string s = v->is_string() ? v->get<std::string>() : "";
        if (s == "off") out = Policy::Off;
        else if (s == "warn") out = Policy::Warn;
        else if (s == "halt") out = Policy::Halt;
        else fail("policy", *v, "\"off\", \"warn\" or \"halt\"");
    }
    void integer(const char* key, int& out, int lo) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_number_integer() || v->get<long>() < lo || v->get<long>() > 1000000000)
            fail(key, *v, fmt::format("an integer >= {}", lo));
        out = v->get<int>();
    }
    void number(const char* key, double& out, bool positive) {
        const json* v = get(key);
        if (!v) return;
        if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0 ||
            (positive && v->get<double>() == 0))
            fail(key, *v, positive ? "a number > 0" : "a number >= 0");
        out = v->get<double>();
    }
    void rule(SpikeRule& out) {
        const json* v = get("rule");
        if (!v) return;
        std::string s = v->is_string() ? v->get<std::string>() : "";
        if (s == "additive") out = SpikeRule::Additive;
        else if (s == "ratio") out = SpikeRule::Ratio;
        else if (s == "zscore") out = SpikeRule::ZScore;
        else fail("rule", *v, "\"additive\", \"ratio\" or \"zscore\"");
    }
    void done() const {
        if (!obj_) return;
        for (auto it = obj_->begin(); it != obj_->end(); ++it)
            if (!seen_.count(it.key()))
                throw DetectorConfigError(fmt::format("unknown config field \"detectors.{}.{}\"", name_, it.key()));
    }

  private:
    const json* get(const char* key) {
        seen_.insert(key);
        return obj_ && obj_->contains(key) ? &obj_->at(key) : nullptr;
    }
    [[noreturn]] void fail(const std::string& key, const json& v, const std::string& allowed) const {
        throw DetectorConfigError(fmt::format("config field \"detectors.{}{}{}\" is {}; expected {}", name_,
                                              key.empty() ? "" : ".", key, v.dump(), allowed));
    }
    std::string name_;
    const json* obj_ = nullptr;
    std::set<std::string> seen_;
};

const char* rule_name(SpikeRule r) {
    return r == SpikeRule::Additive ? "additive" : r == SpikeRule::Ratio ? "ratio" : "zscore";
}

}  // namespace

const char* policy_name(Policy p) { return p == Policy::Off ? "off" : p == Policy::Warn ? "warn" : "halt"; }

DetectorsConfig detectors_from_json(const json& j) {
    DetectorsConfig c;
    if (j.is_null()) return c;
    if (!j.is_object()) throw DetectorConfigError("config field \"detectors\" must be an object");
    static const std::set<std::string> known = {"grad_spike", "nonfinite",  "leak_probe", "loss_floor",
                                                "loss_jump",  "divergence", "tp_drift",   "replica_mismatch",
                                                "straggler",  "health_check", "webhook"};
    for (auto it = j.begin(); it != j.end(); ++it)
        if (!known.count(it.key()))
            throw DetectorConfigError(fmt::format(
                "unknown detector \"detectors.{}\"; known: grad_spike, nonfinite, leak_probe, loss_floor, loss_jump, "
                "divergence, tp_drift, replica_mismatch, straggler, health_check, webhook",
                it.key()));

    Fields g(j, "grad_spike");
    g.policy(c.grad_spike.policy);
    g.integer("window", c.grad_spike.window, 1);
    g.rule(c.grad_spike.rule);
    g.number("threshold", c.grad_spike.threshold, false);
    g.number("alert_ratio", c.grad_spike.alert_ratio, true);
    g.integer("sustained_steps", c.grad_spike.sustained_steps, 1);
    g.done();
    Fields n(j, "nonfinite");
    n.policy(c.nonfinite.policy);
    n.done();
    Fields p(j, "leak_probe");
    p.policy(c.leak_probe.policy);
    p.integer("every", c.leak_probe.every, 1);
    p.done();
    Fields f(j, "loss_floor");
    f.policy(c.loss_floor.policy);
    f.number("floor", c.loss_floor.floor, false);
    f.number("heldout_gap", c.loss_floor.heldout_gap, true);
    f.integer("heldout_gap_steps", c.loss_floor.heldout_gap_steps, 1);
    f.done();
    Fields lj(j, "loss_jump");
    lj.policy(c.loss_jump.policy);
    lj.integer("window", c.loss_jump.window, 1);
    lj.number("margin", c.loss_jump.margin, true);
    lj.done();
    Fields d(j, "divergence");
    d.policy(c.divergence.policy);
    d.integer("window", c.divergence.window, 1);
    d.number("grad_growth", c.divergence.grad_growth, true);
    d.number("min_loss_drop", c.divergence.min_loss_drop, false);
    d.done();
    Fields td(j, "tp_drift");
    td.policy(c.tp_drift.policy);
    td.number("threshold", c.tp_drift.threshold, true);
    td.integer("growth_checks", c.tp_drift.growth_checks, 2);
    td.done();
    Fields rm(j, "replica_mismatch");
    rm.policy(c.replica_mismatch.policy);
    rm.done();
    Fields st(j, "straggler");
    st.policy(c.straggler.policy);
    st.number("factor", c.straggler.factor, true);
    st.integer("steps", c.straggler.steps, 1);
    st.integer("warmup", c.straggler.warmup, 0);
    st.done();
    Fields hc(j, "health_check");
    hc.policy(c.health_check.policy);
    hc.done();
    if (j.contains("webhook")) {
        const json& w = j.at("webhook");
        if (!w.is_string() || (!w.get<std::string>().empty() && w.get<std::string>().rfind("http://", 0) != 0))
            throw DetectorConfigError(fmt::format("config field \"detectors.webhook\" is {}; expected \"\" or an "
                                                  "http:// URL",
                                                  w.dump()));
        c.webhook = w.get<std::string>();
    }
    return c;
}

json detectors_to_json(const DetectorsConfig& c) {
    return {
        {"grad_spike",
         {{"policy", policy_name(c.grad_spike.policy)},
          {"window", c.grad_spike.window},
          {"rule", rule_name(c.grad_spike.rule)},
          {"threshold", c.grad_spike.threshold},
          {"alert_ratio", c.grad_spike.alert_ratio},
          {"sustained_steps", c.grad_spike.sustained_steps}}},
        {"nonfinite", {{"policy", policy_name(c.nonfinite.policy)}}},
        {"leak_probe", {{"policy", policy_name(c.leak_probe.policy)}, {"every", c.leak_probe.every}}},
        {"loss_floor",
         {{"policy", policy_name(c.loss_floor.policy)},
          {"floor", c.loss_floor.floor},
          {"heldout_gap", c.loss_floor.heldout_gap},
          {"heldout_gap_steps", c.loss_floor.heldout_gap_steps}}},
        {"loss_jump",
         {{"policy", policy_name(c.loss_jump.policy)}, {"window", c.loss_jump.window}, {"margin", c.loss_jump.margin}}},
        {"divergence",
         {{"policy", policy_name(c.divergence.policy)},
          {"window", c.divergence.window},
          {"grad_growth", c.divergence.grad_growth},
          {"min_loss_drop", c.divergence.min_loss_drop}}},
        {"tp_drift",
         {{"policy", policy_name(c.tp_drift.policy)},
          {"threshold", c.tp_drift.threshold},
          {"growth_checks", c.tp_drift.growth_checks}}},
        {"replica_mismatch", {{"policy", policy_name(c.replica_mismatch.policy)}}},
        {"straggler",
         {{"policy", policy_name(c.straggler.policy)}, {"factor", c.straggler.factor}, {"steps", c.straggler.steps},
          {"warmup", c.straggler.warmup}}},
        {"health_check", {{"policy", policy_name(c.health_check.policy)}}},
        {"webhook", c.webhook},
    };
}

}  // namespace hlat::detectors
