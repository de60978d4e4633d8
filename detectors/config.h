// Detector settings: per detector a policy (off, warn, halt) and its rule's
// parameters; validated in one place. JSON section "detectors" of a training
// config, every field optional: a section per detector (DetectorsConfig::
// sections() names them), its fields as its fields() lists them, and
// "webhook": "http(s)://host[:port]/path" or "", "webhook_format" and
// "webhook_ca" (session/webhook.h). Each section's fields() lists its
// fields once, with their bounds: reading a config and writing one
// (config.cpp) both go through it, so a new field is one line there.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace hlat::detectors {

// What an alert does: nothing, a warning, a halt, or a halt that recovers:
// rewind_skip stops the run, and the supervisor (`hlat run`) restarts it from
// a checkpoint before the alert, skipping the offending batches (RewindConfig).
enum class Policy { Off, Warn, Halt, RewindSkip };
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

// Early warning on the model's internals (docs/internals.md). Bounds with a
// physical meaning, and jumps judged against the run's own recent history
// after warm-up; bench/early_warning measures each rule's lead time and
// false alarms (docs/detectors.md has the numbers behind these defaults).
struct AttentionLogitConfig {
    Policy policy = Policy::Warn;
    // A head's largest pre-softmax logit beyond `bound`: its softmax is
    // one-hot (Wortsman et al. 2023's attention-logit growth; a mid-scale
    // Kimi K2 run passed 1,000 before they capped logits at 100). Or, once
    // past `floor`, projected beyond `bound` at the largest learning rate the
    // schedule still has ahead (the scalar lr_max_ahead, when recorded):
    // logit x (lr_max_ahead / lr)^lr_exponent. Logits grew about as
    // lr^1.5 over bench/early_warning's ramps.
    double bound = 1000.0;
    double floor = 100.0;
    double lr_exponent = 1.5;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("bound", bound, true);
        f.number("floor", floor, true);
        f.number("lr_exponent", lr_exponent, false);
    }
};

struct AttentionEntropyConfig {
    Policy policy = Policy::Warn;
    double floor = 0.001;   // nats: a head's mean attention entropy below this has collapsed
    int warmup_steps = 50;  // not judged before (a fresh model's heads are near uniform anyway)
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("floor", floor, true);
        f.integer("warmup_steps", warmup_steps, 0);
    }
};

struct UpdateRatioConfig {
    Policy policy = Policy::Warn;
    // The median over tensors of (update ratio / its median over the previous
    // `window` steps) above `jump`: every tensor's update grew at once, as a
    // learning-rate fault does in the step it starts. A schedule moves it a
    // few percent a step.
    double jump = 2.0;
    int window = 10;
    int warmup_steps = 100;  // a linear warm-up doubles the rate in its first steps
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("jump", jump, true);
        f.integer("window", window, 1);
        f.integer("warmup_steps", warmup_steps, 0);
    }
};

struct EpsRegimeConfig {
    Policy policy = Policy::Warn;
    // A tensor whose Adam denominators are mostly epsilon (Molybog et al.
    // 2023): its updates no longer scale with its gradients.
    double share = 0.75;
    int warmup_steps = 100;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("share", share, true);
        f.integer("warmup_steps", warmup_steps, 0);
    }
};

struct LogzDriftConfig {
    Policy policy = Policy::Warn;
    // The output logits' mean log Z moved this many nats from where it stood
    // after warm-up (z-loss holds it near 0; its drift precedes output-logit
    // divergence, Wortsman et al. 2023).
    double drift = 10.0;
    int warmup_steps = 100;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("drift", drift, true);
        f.integer("warmup_steps", warmup_steps, 0);
    }
};

struct PrecisionStallConfig {
    Policy policy = Policy::Warn;
    // A tensor stalls when rounding throws away more than this share of its
    // non-zero updates (a majority: most of what the optimizer asks of it
    // never reaches the weight) ...
    double share = 0.5;
    // ... at every judged step for this many steps (a lasting stretch, past
    // the learning-rate warm-up, where tiny rates lose every update for a while).
    int steps = 100;
    template <class Fields>
    void fields(Fields& f) {
        f.policy(policy);
        f.number("share", share, true);
        f.integer("steps", steps, 0);
    }
};

// Not a detector: the session stores every store_every-th step of each
// statistic over layers, heads or tensors, keeps the last `steps` steps of
// all of them in memory, and stores those left out when an alert fires.
// The detectors see every step; a replay of the store sees the stored ones.
struct FlightRecorderConfig {
    int steps = 64;
    int store_every = 10;
    template <class Fields>
    void fields(Fields& f) {
        f.integer("steps", steps, 0);
        f.integer("store_every", store_every, 1);
    }
};

// Recovery by rewind_skip, as PaLM recovered from its loss spikes (it
// restarted about 100 steps before a spike and skipped 200-500 batches): the
// batches of the skip_steps steps up to and including the alert's (from the
// start of its episode, for a loss that jumped and stayed up) are never
// trained on again, and the restart is from the newest checkpoint at least
// min_steps_back steps before the first of them. Best on loss_jump, whose
// one-step outliers are bad batches; on grad_spike it also rewinds on the
// one-step gradient spikes real text has and skips good data.
struct RewindConfig {
    int min_steps_back = 0;
    int skip_steps = 1;
    int max_rewinds = 5;  // then the run halts for good
    template <class Fields>
    void fields(Fields& f) {
        f.integer("min_steps_back", min_steps_back, 0);
        f.integer("skip_steps", skip_steps, 1);
        f.integer("max_rewinds", max_rewinds, 0);
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
    AttentionLogitConfig attention_logit;
    AttentionEntropyConfig attention_entropy;
    UpdateRatioConfig update_ratio;
    EpsRegimeConfig eps_regime;
    LogzDriftConfig logz_drift;
    PrecisionStallConfig precision_stall;
    FlightRecorderConfig flight_recorder;
    RewindConfig rewind;
    std::string webhook;                 // http(s)://host[:port]/path or ""
    std::string webhook_format = "json";  // or "slack", "discord": the payload those take
    std::string webhook_ca;               // a CA file for an https webhook's certificate ("" : the system's)
    std::string webhook_page;             // the page's address as the team opens it: each post links the run

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
        visit("attention_logit", attention_logit);
        visit("attention_entropy", attention_entropy);
        visit("update_ratio", update_ratio);
        visit("eps_regime", eps_regime);
        visit("logz_drift", logz_drift);
        visit("precision_stall", precision_stall);
        visit("flight_recorder", flight_recorder);
        visit("rewind", rewind);
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

// A webhook URL's path (and any user:password@) is its secret: Slack's,
// Discord's and most others' URLs are the credential. What a run's page, its
// API and its logs show is "scheme://host[:port]/…". A config holding a
// redacted URL (copied from the page, say) posts nothing, and says so.
std::string redacted_webhook(const std::string& url);
// A webhook URL's host[:port] ("[::1]:8443" for IPv6), past any user:password@;
// "" without "scheme://". The sender and the redaction read it alike.
std::string webhook_host(const std::string& url);
bool is_redacted_webhook(const std::string& url);
// A run's config (a JSON object with a "detectors" section) as shown to
// readers: its detectors.webhook redacted, everything else as stored.
nlohmann::json config_for_readers(nlohmann::json run_config);

}  // namespace hlat::detectors
