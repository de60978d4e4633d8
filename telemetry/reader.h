// Reading the store: runs, series (full or downsampled), events, alerts,
// checkpoints, evals and uptime. A reader has its own read-only connection;
// in WAL mode it never blocks the writer, and sees each commit as it lands.
#pragma once

#include "telemetry/records.h"
#include "telemetry/sqlite.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hlat::telemetry {

struct SeriesPoint {
    int64_t step;
    double value;  // NaN where NaN was written
    double wall_time;
};

// One bucket of a downsampled series: min, max and mean over its points (NaN
// ignored), the value at its last step, whether any point was NaN, and the
// wall times of its first and last steps (NaN where a store predates them).
struct Bucket {
    int64_t first_step, last_step;
    double min, max, last;
    bool has_nan;
    double mean, first_time, last_time;
};

// Training time over wall time, the paper's Table 1 measure: a run trains from
// each start or restart event to the stop, crash or halt that ends it (or, if
// it died without a word, to its last event or metric); wall time runs from
// the first start to the last end.
struct Uptime {
    double training_seconds = 0.0;
    double wall_seconds = 0.0;
    double ratio = 0.0;  // 1 when the run never stopped; 0 when unknown
    int restarts = 0;
    // Each stretch of training, [start, end] wall times in order: what the
    // page's uptime timeline draws (GET .../events "uptime.segments").
    std::vector<std::pair<double, double>> segments;
};

// A statistic over layers, heads or tensors as a heatmap: the step range in
// at most `buckets` buckets of equal width; in each, one value per element,
// the bucket's rows reduced (max by default: growth shows; min for a
// statistic that collapses, such as attention entropy). NaN where a bucket
// has no finite value of an element.
enum class Reduce { Max, Min, Mean, Last };
struct Heatmap {
    std::vector<std::string> labels;         // the elements, one heatmap row each
    std::vector<int64_t> first_step, last_step;  // per bucket that has rows
    std::vector<float> values;               // bucket-major: values[b * labels.size() + element]
    size_t buckets() const { return first_step.size(); }
};

struct RunSummary {
    RunRecord run;
    int64_t first_step = -1, last_step = -1;  // of the loss series; -1 without one
    // Steps the loss series spans: a log that starts at step 1 has 100 in 1..100.
    int64_t steps() const { return last_step < 0 ? 0 : last_step - first_step + 1; }
    double last_loss = NAN;
    double tokens_seen = NAN;
    int64_t alerts = 0;
    Uptime uptime;
};

class Reader {
  public:
    // Opens an existing store read-only (migrating a store of an older hlat
    // forward first); a missing file, a file that is not SQLite or a store
    // from a newer hlat is a StoreError.
    explicit Reader(const std::string& path, int busy_timeout_ms = 5000);

    std::vector<RunSummary> runs();
    // The runs whose status is running, without their summaries (cheap: one
    // read of the runs table, for a sweep every second).
    std::vector<RunRecord> running_runs();
    std::optional<RunRecord> find_run(const std::string& name);
    // The run's metric keys by name, the first `limit` of them (0: all).
    std::vector<std::string> keys(int64_t run, int64_t limit = 0);
    int64_t key_count(int64_t run);
    // Points with step in [first, last]; the first `limit` of them when limit > 0.
    std::vector<SeriesPoint> series(int64_t run, const std::string& key, int64_t first, int64_t last,
                                    int64_t limit = 0);
    // The newest `limit` points with step in [first, last], in step order.
    std::vector<SeriesPoint> series_newest(int64_t run, const std::string& key, int64_t first, int64_t last,
                                           int64_t limit);
    // Per-rank series (rank_metrics): the keys, and one key's points by rank,
    // every stride-th step with the stride that keeps each rank to at most
    // max_points (all steps when they fit).
    std::vector<std::string> rank_keys(int64_t run, int64_t limit = 0);
    struct RankSeries {
        int64_t stride = 1;
        std::map<int, std::vector<SeriesPoint>> ranks;
    };
    RankSeries rank_series(int64_t run, const std::string& key, int64_t max_points);
    // The same range in at most `buckets` buckets of equal step width (a
    // multiple of 64 for long ranges, so whole precomputed blocks are used).
    std::vector<Bucket> downsample(int64_t run, const std::string& key, int64_t first, int64_t last, int buckets);
    // Statistics over layers, heads or tensors (reader_vectors.cpp): the
    // run's keys, a key's element names (the indices "0", "1", ... when a
    // source sent none), its rows with step in [first, last] (labels set),
    // and a heatmap of them.
    std::vector<std::string> vector_keys(int64_t run);
    std::vector<std::string> vector_labels(int64_t run, const std::string& key);
    std::vector<VectorPoint> vector_series(int64_t run, const std::string& key, int64_t first, int64_t last,
                                           int64_t limit = 0);
    std::optional<int64_t> last_vector_step(int64_t run, const std::string& key);
    Heatmap heatmap(int64_t run, const std::string& key, int64_t first, int64_t last, int buckets,
                    Reduce reduce = Reduce::Max);
    std::vector<Event> events(int64_t run);
    // The ids of the run's events of these kinds at `first_step` or later,
    // in step order (then as they happened): a replay reads their details a
    // window at a time (events_by_id), since a run may hold gigabytes of them.
    std::vector<int64_t> event_ids_of(int64_t run, const std::vector<std::string>& kinds, int64_t first_step);
    // These events, in the order of `ids` (an id not stored is left out).
    std::vector<Event> events_by_id(const std::vector<int64_t>& ids);
    // At most `limit` events from the `offset`-th on, in the order they
    // happened, each detail cut to `max_detail` bytes (0: whole); the run's
    // event count in *total.
    std::vector<Event> events_page(int64_t run, int64_t offset, int64_t limit, size_t max_detail, int64_t* total);
    // Alerts of the run in the order they were raised.
    std::vector<Alert> alerts(int64_t run);
    // The newest `limit` alerts, in the order they were raised.
    std::vector<Alert> latest_alerts(int64_t run, int64_t limit);
    int64_t alert_count(int64_t run);
    // The alerts with step >= first_step in step order (the order raised
    // within a step), one row in memory at a time.
    void for_each_alert(int64_t run, int64_t first_step, const std::function<void(const Alert&)>& visit);
    // Alerts raised after the one with id *after_id (0: from the first), in
    // the order raised; *after_id becomes the newest one's id. What a live
    // view asks for every tick: an index seek, not a count of all before.
    std::vector<Alert> alerts_after(int64_t run, int64_t* after_id);
    // The id of the run's newest alert, 0 when it has none.
    int64_t newest_alert_id(int64_t run);
    // The newest step of a series, if it has any.
    std::optional<int64_t> last_step(int64_t run, const std::string& key);
    std::vector<CheckpointRecord> checkpoints(int64_t run);
    // What step `step` trained on (docs/provenance.md), if the run recorded it.
    std::optional<BatchRecord> batch(int64_t run, int64_t step);
    // The documents of `refs` the run recorded (others are left out).
    std::vector<DocumentRecord> documents(int64_t run, const std::vector<int64_t>& refs);
    std::vector<EvalRecord> evals(int64_t run);
    Uptime uptime(int64_t run);
    // When the run last showed life (its newest loss row or event) and the
    // newest step it recorded (-1: none): what a supervisor watches for hangs.
    struct Activity {
        double wall_time = 0.0;
        int64_t step = -1;
    };
    Activity last_activity(int64_t run);
    // Who asked for a halt of the run that the trainer has not handled yet.
    std::optional<std::string> pending_halt(int64_t run);

  private:
    std::optional<int64_t> key_id(const std::string& key);
    std::vector<std::string> key_names(int64_t run, const char* table, int64_t limit);
    // The first and last wall times of every metric block of the run, sorted.
    std::vector<double> metric_block_times(int64_t run);
    Database db_;
};

}  // namespace hlat::telemetry
