// Detector settings: per detector a policy (off, warn, halt) and its rule's
// parameters; validated in one place. JSON section "detectors" of a training
// config, every field optional:
//   "grad_spike": {"policy", "window", "rule", "threshold", "alert_ratio", "sustained_steps"}
//   "nonfinite":  {"policy"}
//   "leak_probe": {"policy", "every"}
//   "loss_floor": {"policy", "floor", "heldout_gap"}
//   "loss_jump":  {"policy", "window", "margin"}
//   "divergence": {"policy", "window", "grad_growth", "min_loss_drop"}
//   "tp_drift":   {"policy", "threshold", "growth_checks"}
//   "replica_mismatch": {"policy"}
//   "straggler":  {"policy", "factor", "steps", "warmup"}
//   "health_check": {"policy"}
//   "webhook":    "http://host:port/path" or ""
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
    int sustained_steps = 50;             // alert when an episode lasts this long
};

struct NonFiniteConfig {
    Policy policy = Policy::Halt;
};

struct LeakProbeConfig {
    Policy policy = Policy::Halt;
    int every = 100;  // steps between probes (and one before the first step)
};

struct LossFloorConfig {
    Policy policy = Policy::Warn;
    double floor = 0.05;       // smoothed training loss below this, in nats
    double heldout_gap = 2.0;  // or this far below the latest held-out loss
    // for this many steps in a row: a leaking mask keeps the loss down, while
    // an easy stretch of real text (a table, boilerplate) dips it for a few steps
    int heldout_gap_steps = 50;
};

struct LossJumpConfig {
    Policy policy = Policy::Warn;
    int window = 50;     // recent maximum over this many steps
    double margin = 1.0; // nats above it
};

struct DivergenceConfig {
    Policy policy = Policy::Warn;
    int window = 200;            // compare smoothed values this many steps apart
    double grad_growth = 3.0;    // grad norm trend grew by this factor
    double min_loss_drop = 0.0;  // while the loss trend fell by no more than this
};

struct TpDriftConfig {
    Policy policy = Policy::Warn;
    double threshold = 1e-2;  // max |w - w_tp0| of a norm weight
    int growth_checks = 5;    // or growing at this many consecutive checks
};

struct ReplicaMismatchConfig {
    Policy policy = Policy::Halt;  // replicas that disagree train a different model on each rank
};

struct StragglerConfig {
    Policy policy = Policy::Warn;
    double factor = 2.0;  // a rank's compute time over the median of the others'
    int steps = 5;        // for this many consecutive steps
    int warmup = 10;      // steps ignored at the start (allocation, first-touch page faults, caches)
};

struct HealthCheckConfig {
    Policy policy = Policy::Halt;  // a rank computing wrong numbers corrupts every replica it reduces with
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
