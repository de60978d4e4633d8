// Alerts grouped into episodes: a run whose gradients went NaN at step 900
// and stayed so may hold one alert per step, and a reader wants one line,
// "nonfinite x600, steps 900-1499", not 600. An episode is a stretch of
// alerts of one kind and severity, each within kEpisodeGap steps of the one
// before. The page, the API, `hlat alerts`, the webhook and the report all
// group with this.
#pragma once

#include "telemetry/records.h"

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace hlat::telemetry {

constexpr int64_t kEpisodeGap = 10;

struct AlertEpisode {
    std::string kind, severity;
    int64_t first_step = 0, last_step = 0;
    int64_t count = 0;
    int64_t worst_step = 0;      // the alert with the worst value (the first one when none has a value)
    double worst_value = 0.0;    // NaN when no alert carries one; non-finite values are the worst
    bool has_value = false;
    std::string message;         // the worst alert's
};

// The number an alert is judged by: the first of its data's ratio, loss,
// norm, value, drift, grad_norm that is present (NaN and Inf included, as
// JSON null, "nan" or "inf"), or nothing.
bool alert_value(const Alert& a, double& value);

// Episodes in order of their first step (alerts are taken in step order).
std::vector<AlertEpisode> alert_episodes(std::vector<Alert> alerts);

// The same, from alerts handed over one at a time in step order (a run's
// alerts streamed from the store: none kept but the episodes). With `keep`,
// at most that many are kept: those whose last step is newest (an episode
// still going on is never cut), so a run of half a million one-step spikes
// costs the memory of `keep` episodes, and total() counts them all.
class EpisodeBuilder {
  public:
    explicit EpisodeBuilder(size_t keep = std::numeric_limits<size_t>::max() / 4)
        : keep_(std::min(keep, std::numeric_limits<size_t>::max() / 4)) {}
    void add(const Alert& a);
    // The kept episodes in order of their first step.
    std::vector<AlertEpisode> episodes() const;
    int64_t total() const { return total_; }

  private:
    // The indices, in order, of the `keep_` episodes newest by last step and,
    // while alerts still come, of each kind and severity's newest (the one an
    // alert may extend); the rest are dropped.
    std::vector<size_t> kept(bool growing_too) const;
    void compact();

    size_t keep_;
    int64_t total_ = 0;
    std::vector<AlertEpisode> out_;
    std::map<std::pair<std::string, std::string>, size_t> newest_;  // kind, severity -> its newest episode
};

// {"kind", "severity", "first_step", "last_step", "count", "worst_step",
// "worst_value", "message"}: worst_value null when no alert carries a value,
// the strings "nan", "inf" and "-inf" for non-finite ones.
nlohmann::json episode_json(const AlertEpisode& e);

// Groups alerts as they come, for whoever sees one at a time (the webhook):
// add() says whether an alert opens an episode, and if it closes an earlier
// one of its kind, returns that one in `closed`.
class EpisodeTracker {
  public:
    bool add(const Alert& a, AlertEpisode* closed = nullptr);

  private:
    std::vector<AlertEpisode> open_;  // the newest episode of each kind and severity
};

}  // namespace hlat::telemetry
