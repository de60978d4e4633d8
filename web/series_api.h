// The endpoints that read one run's series (api.h lists them all):
//   series    every point (at most 100,000; next_from says where the rest
//             begins), or at most N envelope buckets
//             [first, last, min, max, last value, has_nan, mean, first time, last time]
//   episodes  spike episodes at full resolution (spike_episodes below)
//   csv       every stored point of 1 to 64 keys, one row per step, streamed
//   rank_series  one per-rank key's points by rank ({"0": [[step, value], ...], ...}),
//             every stride-th step so that no rank has more than `points` (2000)
#pragma once

#include "telemetry/reader.h"
#include "web/api.h"

#include <cstdint>
#include <deque>
#include <vector>

namespace hlat::web {

Response series_reply(telemetry::Reader& reader, int64_t run, const Request& r);
Response episodes_reply(telemetry::Reader& reader, int64_t run, const Request& r);
Response csv_reply(const std::string& store, int64_t run, const Request& r);
Response rank_series_reply(telemetry::Reader& reader, int64_t run, const Request& r);

// A run of consecutive points above the spike threshold.
struct SpikeEpisode {
    int64_t first_step, last_step, peak_step;
    double peak;
};

// The page's shading rule, applied to every stored point: a point is in a
// spike when it exceeds the mean of the previous `window` finite values plus
// `margin` (the HLAT paper's threshold for gradient-norm spikes: 20 and 0.1).
// Non-finite points are spikes too (a NaN step is never quiet).
std::vector<SpikeEpisode> spike_episodes(const std::vector<telemetry::SeriesPoint>& points, size_t window = 20,
                                         double margin = 0.1);

// The same rule over points handed over one at a time in step order.
class SpikeEpisodeFinder {
  public:
    explicit SpikeEpisodeFinder(size_t window = 20, double margin = 0.1) : window_(window), margin_(margin) {}
    void add(const telemetry::SeriesPoint& p);
    std::vector<SpikeEpisode>& episodes() { return out_; }

  private:
    size_t window_;
    double margin_;
    std::vector<SpikeEpisode> out_;
    std::deque<double> recent_;
    double sum_ = 0.0;
    bool open_ = false;
};

}  // namespace hlat::web
