// Stability detectors over step records. The same code runs online inside
// `hlat train` and offline in `hlat detect`, which replays a stored run; given
// the same records both raise the same alerts.
//
// Rules, defaults and evidence (config.h holds the knobs):
// - grad_spike: running mean r of the grad norm over the previous `window`
//   (20) steps. An episode (the paper's measure) runs while the norm exceeds
//   r + threshold (additive, 0.1), r * threshold (ratio) or r + threshold
//   standard deviations (zscore). Alerts: "grad_spike" when a norm exceeds
//   alert_ratio (5) x r, once per episode; "sustained_grad_spike" when an
//   episode reaches sustained_steps (50). Evidence: norm, mean, ratio, length.
// - nonfinite: a NaN or Inf loss or grad norm. The trainer skips that update,
//   so no poisoned weights are written. Evidence: loss, grad norm.
// - loss_floor: the smoothed training loss (EMA, alpha 0.1) below `floor`
//   (0.05 nats), or more than heldout_gap (2 nats) below the latest held-out
//   loss: the signature of a leak. Evidence: smoothed loss, held-out loss.
// - loss_jump: a loss more than `margin` (1 nat) above the maximum of the
//   previous `window` (50) steps. Evidence: loss, recent maximum.
// - divergence: over `window` (200) steps the grad norm trend (EMA) grew by
//   grad_growth (3x) while the loss trend fell by no more than min_loss_drop.
//   Evidence: both trends at both ends.
// - tp_drift: the replicated norm weights differ across tensor-parallel ranks
//   by more than `threshold` (1e-2), or the drift grew at each of the last
//   `growth_checks` (5) checks. Evidence: drift, previous values.
// - replica_mismatch: a data-parallel replica's parameter (or gradient) hash
//   differs from replica 0's: the all-reduce is broken. Evidence: the ranks,
//   the first tensor.
// - information_leak: a causality probe measured logits at early positions
//   changing when only later tokens changed (the `causality_leak` series: the
//   largest change, 0 when none). The embedded trainer's probe needs the model,
//   so it lives in the trainer and raises this alert itself; the Python
//   client's probe sends the series, and this detector turns it into the same
//   alert, with leak_probe's policy.
// - straggler: one rank's compute time exceeds `factor` (2) x the median of
//   the other ranks' for `steps` (5) consecutive steps (the same rank each
//   time), after the first `warmup` (10) steps. Evidence: rank, ratio. Once
//   per episode.
// - health_check: the between-steps health check found a rank whose GEMMs of
//   exact integers came out wrong (silent data corruption). Evidence: count.
#pragma once

#include "detectors/config.h"
#include "telemetry/records.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <deque>
#include <string>
#include <map>
#include <memory>
#include <vector>

namespace hlat::detectors {

// One training step as the store holds it. Fields a trainer did not report
// are NaN.
struct StepRecord {
    int64_t step = 0;
    bool has_loss = true;       // false: the trainer does not report it (not the same as NaN)
    bool has_grad_norm = true;
    double loss = NAN;
    double grad_norm = NAN;
    double param_norm = NAN;
    double lr = NAN;
    double heldout_loss = NAN;  // when a held-out evaluation followed this step
    // Distributed runs, on the steps they were checked:
    double tp_drift = NAN;          // max |w - w_tp0| over the replicated (norm) weights
    double replica_mismatch = NAN;  // data-parallel ranks whose hash differs from their replica 0
    std::string replica_detail;     // which ranks and the first tensor, when known
    double causality_leak = NAN;    // largest logit change a causality probe saw (0: none)
    // Distributed runs, every step: the slowest rank's compute time over the
    // median of the others', and which rank that is.
    double straggler_ratio = NAN;
    double straggler_rank = NAN;
    std::string straggler_detail;     // its host and times, when known
    // On health-check steps: how many ranks computed wrong numbers, and who.
    double health_check_failures = NAN;
    std::string health_detail;
};

// The metric keys the detectors read; sets the field of `r` that `key` feeds
// and returns true, or returns false for any other key.
bool apply_metric(StepRecord& r, const std::string& key, double value);
// Adds to `into` what `later`, a later part of the same step, reports.
void merge_step(StepRecord& into, const StepRecord& later);
// The keys apply_metric reads, for messages ("none of loss, grad_norm, ...").
const std::vector<std::string>& detector_keys();

// Who produced the records: the words of an alert depend on it (only hlat's
// own trainer skips the update of a step with a non-finite loss).
enum class Source { Embedded, External };

// An alert and what its policy says to do.
struct Fired {
    telemetry::Alert alert;
    Policy policy;
};

class Detector {
  public:
    virtual ~Detector() = default;
    virtual void observe(const StepRecord& r, std::vector<telemetry::Alert>& out) = 0;
    // The window of recent steps a detector judges by, so that a run resumed
    // from a checkpoint raises the alerts an uninterrupted run raises. null
    // for a detector that remembers nothing.
    virtual nlohmann::json state() const { return nullptr; }
    virtual void restore(const nlohmann::json& /*state*/) {}
};

// Every enabled step-record detector, in a fixed order.
class DetectorSuite {
  public:
    explicit DetectorSuite(const DetectorsConfig& config, Source source = Source::Embedded);
    ~DetectorSuite();
    // Alerts of this step (wall_time left 0 for the caller to stamp).
    std::vector<Fired> observe(const StepRecord& r);
    // Every detector's state by name ({"grad_spike": ..., ...}); restore()
    // takes what state() gave, and ignores detectors it does not name.
    nlohmann::json state() const;
    void restore(const nlohmann::json& state);

  private:
    struct Entry {
        std::string name;
        std::unique_ptr<Detector> detector;
        Policy policy;
    };
    std::vector<Entry> detectors_;
};

// The paper's spike episodes: feed grad norms in step order.
class SpikeTracker {
  public:
    SpikeTracker(int window, SpikeRule rule, double threshold);
    struct Observation {
        bool window_full;    // r is over a full window
        double mean;         // r, over the previous steps
        bool in_episode;     // this step is part of a spike episode
        bool episode_start;  // and the first one of it
        int episode_length;  // steps so far in the episode (0 outside)
        int ended_length;    // length of an episode that ended just before this step, else 0
    };
    Observation observe(double grad_norm);
    nlohmann::json state() const;
    void restore(const nlohmann::json& state);

  private:
    int window_;
    SpikeRule rule_;
    double threshold_;
    std::deque<double> recent_;
    int length_ = 0;
};

// Spike-episode lengths of a grad-norm series (length -> episodes), an
// episode still open at the end included: `hlat spikes` and the post-mortem.
std::map<int, long> spike_episode_lengths(const std::vector<double>& grad_norms, int window, SpikeRule rule,
                                          double threshold);

}  // namespace hlat::detectors
