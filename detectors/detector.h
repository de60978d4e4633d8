// Stability detectors over named points: points in, alerts out. Every source
// hands its steps to a run session (session/run_session.h), which runs these
// on the same points it stores; `hlat detect` replays a stored run through
// them. Given the same points every road raises the same alerts.
//
// Rules, defaults and evidence (config.h holds the knobs):
// - grad_spike: running mean r of the grad norm over the previous `window`
//   (20) steps. An episode (the paper's measure) runs while the norm exceeds
//   r + threshold (additive, 0.1), r * threshold (ratio) or r + threshold
//   standard deviations (zscore). Alerts: "grad_spike" when a norm exceeds
//   alert_ratio (5) x r, once per episode; "sustained_grad_spike" when an
//   episode reaches sustained_steps (50). Evidence: norm, mean, ratio, length.
// - nonfinite: a NaN or Inf loss or grad norm. A trainer that skipped that
//   update says so with update_skipped = 1 (hlat's does, so no poisoned
//   weights are written). Evidence: loss, grad norm.
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
//   largest change, 0 when none), sent by the embedded trainer's probe and the
//   Python client's alike; leak_probe's policy.
// - straggler: one rank's compute time exceeds `factor` (2) x the median of
//   the other ranks' for `steps` (5) consecutive steps (the same rank each
//   time), after the first `warmup` (10) steps. Evidence: rank, ratio, its
//   compute time (straggler_compute_s). Once per episode.
// - health_check: the between-steps health check found a rank whose GEMMs of
//   exact integers came out wrong (silent data corruption). Evidence: count,
//   and the ranks and hosts from the step's "health_check" event.
#pragma once

#include "detectors/config.h"
#include "detectors/step_view.h"
#include "telemetry/records.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <deque>
#include <string>
#include <map>
#include <memory>
#include <vector>

namespace hlat::detectors {

// An alert and what its policy says to do.
struct Fired {
    telemetry::Alert alert;
    Policy policy;
};

// A detector sees each step as its values by name plus its events (the keys
// and event kinds it reads are declared with it in DetectorSuite's table).
class Detector {
  public:
    virtual ~Detector() = default;
    virtual void observe(const StepView& s, std::vector<telemetry::Alert>& out) = 0;
    // The window of recent steps a detector judges by, so that a run resumed
    // from a checkpoint raises the alerts an uninterrupted run raises. null
    // for a detector that remembers nothing.
    virtual nlohmann::json state() const { return nullptr; }
    virtual void restore(const nlohmann::json& /*state*/) {}
};

// Every enabled detector, in a fixed order.
class DetectorSuite {
  public:
    explicit DetectorSuite(const DetectorsConfig& config);
    ~DetectorSuite();
    // Alerts of this step (wall_time left 0 for the caller to stamp).
    std::vector<Fired> observe(const StepView& s);
    // The keys and event kinds the enabled detectors read.
    const std::vector<std::string>& keys() const { return keys_; }
    bool reads(const std::string& key) const;
    bool reads_event(const std::string& kind) const;
    const std::vector<std::string>& event_kinds() const { return event_kinds_; }
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
    std::vector<std::string> keys_;
    std::vector<std::string> event_kinds_;
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
