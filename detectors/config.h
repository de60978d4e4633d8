// Detector settings: per detector a policy (off, warn, halt) and its rule's
// parameters; validated in one place. JSON section "detectors" of a training
// config, every field optional: a section per detector (DetectorsConfig::
// sections() names them), its fields as its fields() lists them, and
// "webhook": "http://host:port/path" or "". Each section's fields() lists its
// fields once, with their bounds: reading a config and writing one
// (config.cpp) both go through it, so a new field is one line there.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace hlat::detectors {

enum class Policy { Off, Warn, Halt };
enum class SpikeRule { Additive, Ratio, ZScore };

struct GradSpikeConfig {
    Policy policy = Policy::Warn;
    int window = 20;                      // running mean over this many previous steps
    SpikeRule rule = SpikeRule::Additive;  // episode rule; the paper's: norm > mean + 0.1
    double threshold = 0.1;
    double alert_ratio = 5.0;             // alert when the norm exceeds this multiple of the mean
    // Early training's gradient norms swing several-fold from step to step (a
    // clean nanoGPT run reached 6.4x its running mean at step 48): for the
    // first warmup_steps norms a spike must exceed warmup_alert_ratio, as
    // OLMo-core waits for 64-128 values before its 6-sigma rule. Injected
    // faults and real blow-ups are tens to hundreds of times the mean.
    int warmup_steps = 100;
    double warmup_alert_ratio = 20.0;
    int sustained_steps = 50;             // alert when an episode lasts this long
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.integer("window", window, 1);
        f.rule(rule);
        f.number("threshold", threshold, false);
        f.number("alert_ratio", alert_ratio, true);
        f.integer("warmup_steps", warmup_steps, 0);
        f.number("warmup_alert_ratio", warmup_alert_ratio, true);
        f.integer("sustained_steps", sustained_steps, 1);
    }
};

struct NonFiniteConfig {
    Policy policy = Policy::Halt;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
    }
};

struct LeakProbeConfig {
    Policy policy = Policy::Halt;
    int every = 100;  // steps between probes (and one before the first step)
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.integer("every", every, 1);
    }
};

struct LossFloorConfig {
    Policy policy = Policy::Warn;
    double floor = 0.05;       // smoothed training loss below this, in nats
    double heldout_gap = 2.0;  // or this far below the latest held-out loss
    // for this many steps in a row: a leaking mask keeps the loss down, while
    // an easy stretch of real text (a table, boilerplate) dips it for a few steps
    int heldout_gap_steps = 50;
    // A held-out loss is compared for this many steps after it was measured,
    // no longer: in warm-up the training loss falls faster than evaluations
    // come, and a step-0 held-out loss 50 steps on is no yardstick. Steps
    // with no recent held-out loss neither count nor break the run above.
    int heldout_max_age = 25;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("floor", floor, false);
        f.number("heldout_gap", heldout_gap, true);
        f.integer("heldout_gap_steps", heldout_gap_steps, 1);
        f.integer("heldout_max_age", heldout_max_age, 0);
    }
};

struct LossJumpConfig {
    Policy policy = Policy::Warn;
    int window = 50;     // recent maximum over this many steps
    double margin = 1.0; // nats above it
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.integer("window", window, 1);
        f.number("margin", margin, true);
    }
};

struct DivergenceConfig {
    Policy policy = Policy::Warn;
    int window = 200;            // compare smoothed values this many steps apart
    double grad_growth = 3.0;    // grad norm trend grew by this factor
    double min_loss_drop = 0.0;  // while the loss trend fell by no more than this
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.integer("window", window, 1);
        f.number("grad_growth", grad_growth, true);
        f.number("min_loss_drop", min_loss_drop, false);
    }
};

struct TpDriftConfig {
    Policy policy = Policy::Warn;
    double threshold = 1e-2;  // max |w - w_tp0| of a norm weight
    int growth_checks = 5;    // or growing at this many consecutive checks
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("threshold", threshold, true);
        f.integer("growth_checks", growth_checks, 2);
    }
};

struct ReplicaMismatchConfig {
    Policy policy = Policy::Halt;  // replicas that disagree train a different model on each rank
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
    }
};

struct StragglerConfig {
    Policy policy = Policy::Warn;
    double factor = 2.0;  // a rank's compute time over the median of the others'
    int steps = 5;        // for this many consecutive steps
    int warmup = 10;      // steps ignored at the start (allocation, first-touch page faults, caches)
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("factor", factor, true);
        f.integer("steps", steps, 1);
        f.integer("warmup", warmup, 0);
    }
};

struct HealthCheckConfig {
    Policy policy = Policy::Halt;  // a rank computing wrong numbers corrupts every replica it reduces with
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
    }
};

struct DetectorsConfig {
    GradSpikeConfig grad_spike;
    NonFiniteConfig nonfinite;
    LeakProbeConfig leak_probe;
    LossFloorConfig loss_floor;
    LossJumpConfig loss_jump;
    DivergenceConfig divergence;
    TpDriftConfig tp_drift;
    ReplicaMismatchConfig replica_mismatch;
    StragglerConfig straggler;
    HealthCheckConfig health_check;
    std::string webhook;

    // Every detector's section by its name in the config: the one list that
    // reads, writes and names them.
    template <class Visit>
    void sections(Visit&& visit) {
        visit("grad_spike", grad_spike);
        visit("nonfinite", nonfinite);
        visit("leak_probe", leak_probe);
        visit("loss_floor", loss_floor);
        visit("loss_jump", loss_jump);
        visit("divergence", divergence);
        visit("tp_drift", tp_drift);
        visit("replica_mismatch", replica_mismatch);
        visit("straggler", straggler);
        visit("health_check", health_check);
    }
};

struct DetectorConfigError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Validates every field; an unknown detector or field, a window of 0, a
// negative threshold are errors naming "detectors.<name>.<field>".
DetectorsConfig detectors_from_json(const nlohmann::json& j);
nlohmann::json detectors_to_json(const DetectorsConfig& c);
const char* policy_name(Policy p);

}  // namespace hlat::detectors
