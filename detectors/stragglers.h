// The straggler detector's input, from one step's compute time of every rank:
// the slowest rank's time over the median of the other ranks', and its rank.
// The embedded trainer summarises its ranks' times with it (trainer/run/
// fleet_hook.cpp), and the run session the per-rank "rank/compute_s" an
// external job's client sends (session/run_session.cpp): one rule for both.
#pragma once

#include <vector>

namespace hlat {

// ratio NaN for fewer than 2 ranks (or no rank with a positive median of the
// others), rank -1 then.
struct StragglerSummary {
    double ratio;
    int rank;
};
StragglerSummary summarize_stragglers(const std::vector<double>& compute_seconds);

}  // namespace hlat
