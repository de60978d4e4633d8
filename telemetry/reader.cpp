#include "telemetry/reader.h"

#include "telemetry/schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace hlat::telemetry {

constexpr int64_t kBlockSteps = 64;  // as the writer keeps metric_blocks

Reader::Reader(const std::string& path, int busy_timeout_ms) : db_(path, Database::Mode::ReadOnly, busy_timeout_ms) {
    // A store from an older hlat is migrated forward once (the migrations only
    // add); a newer one is refused by prepare_schema.
    if (schema_version(db_) < kSchemaVersion) {
        Database rw(path, Database::Mode::ReadWrite, busy_timeout_ms);
        prepare_schema(rw, true);
    }
    prepare_schema(db_, false);
}

std::optional<int64_t> Reader::key_id(const std::string& key) {
    Statement s = db_.prepare("SELECT id FROM metric_keys WHERE name = ?1");
    s.bind(1, key);
    if (!s.step()) return std::nullopt;
    return s.column_int(0);
}

static RunRecord run_from_row(Statement& s) {
    RunRecord r;
    r.id = s.column_int(0);
    r.name = s.column_text(1);
    r.config = s.column_text(2);
    r.precision = s.column_text(3);
    r.status = s.column_text(4);
    r.host = s.column_text(5);
    r.git_revision = s.column_text(6);
    r.source = s.column_text(7);
    r.started_at = s.column_double(8);
    r.ended_at = s.column_double(9);
    r.meta = s.column_text(10);
    r.tags = s.column_text(11);
    r.note = s.column_text(12);
    return r;
}

static const char* kRunColumns =
    "id, name, config, precision, status, host, git_revision, source, started_at, ended_at, meta, tags, note";

std::vector<RunSummary> Reader::runs() {
    std::vector<RunSummary> out;
    Statement s = db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs ORDER BY started_at, id");
    while (s.step()) {
        RunSummary r;
        r.run = run_from_row(s);
        out.push_back(r);
    }
    auto loss = key_id("loss"), tokens = key_id("tokens_seen");
    Statement last = db_.prepare("SELECT step, value FROM metrics WHERE run_id = ?1 AND key_id = ?2 "
                                 "ORDER BY step DESC LIMIT 1");
    Statement first = db_.prepare("SELECT step FROM metrics WHERE run_id = ?1 AND key_id = ?2 ORDER BY step LIMIT 1");
    Statement alerts = db_.prepare("SELECT count(*) FROM alerts WHERE run_id = ?1");
    for (RunSummary& r : out) {
        if (loss) {
            last.bind(1, r.run.id).bind(2, *loss);
            if (last.step()) {
                r.last_step = last.column_int(0);
                r.last_loss = last.column_double_or_nan(1);
            }
            last.reset();
            first.bind(1, r.run.id).bind(2, *loss);
            if (first.step()) r.first_step = first.column_int(0);
            first.reset();
        }
        if (tokens) {
            last.bind(1, r.run.id).bind(2, *tokens);
            if (last.step()) r.tokens_seen = last.column_double_or_nan(1);
            last.reset();
        }
        alerts.bind(1, r.run.id);
        alerts.step();
        r.alerts = alerts.column_int(0);
        alerts.reset();
        r.uptime = uptime(r.run.id);
    }
    return out;
}

std::vector<RunRecord> Reader::running_runs() {
    std::vector<RunRecord> out;
    Statement s = db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs WHERE status = 'running' ORDER BY id");
    while (s.step()) out.push_back(run_from_row(s));
    return out;
}

std::optional<RunRecord> Reader::find_run(const std::string& name) {
    Statement s = db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs WHERE name = ?1");
    s.bind(1, name);
    if (!s.step()) return std::nullopt;
    return run_from_row(s);
}

// The names of the keys a run has rows of in `table` (metric_blocks for its
// series, rank_metrics for its per-rank ones), sorted.
std::vector<std::string> Reader::key_names(int64_t run, const char* table, int64_t limit) {
    std::vector<std::string> out;
    Statement s = db_.prepare(fmt::format("SELECT name FROM metric_keys WHERE id IN "
                                          "(SELECT DISTINCT key_id FROM {} WHERE run_id = ?1) ORDER BY name LIMIT ?2",
                                          table));
    s.bind(1, run).bind(2, limit > 0 ? limit : -1);
    while (s.step()) out.push_back(s.column_text(0));
    return out;
}

int64_t Reader::key_count(int64_t run) {
    Statement s = db_.prepare("SELECT count(DISTINCT key_id) FROM metric_blocks WHERE run_id = ?1");
    s.bind(1, run);
    s.step();
    return s.column_int(0);
}

std::vector<std::string> Reader::keys(int64_t run, int64_t limit) { return key_names(run, "metric_blocks", limit); }

std::vector<SeriesPoint> Reader::series(int64_t run, const std::string& key, int64_t first, int64_t last,
                                        int64_t limit) {
    std::vector<SeriesPoint> out;
    auto key_ = key_id(key);
    if (!key_) return out;
    Statement s = db_.prepare("SELECT step, value, wall_time FROM metrics WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step LIMIT ?5");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last).bind(5, limit > 0 ? limit : -1);
    while (s.step()) out.push_back({s.column_int(0), s.column_double_or_nan(1), s.column_double(2)});
    return out;
}

std::vector<SeriesPoint> Reader::series_newest(int64_t run, const std::string& key, int64_t first, int64_t last,
                                               int64_t limit) {
    std::vector<SeriesPoint> out;
    auto key_ = key_id(key);
    if (!key_ || limit <= 0) return out;
    Statement s = db_.prepare("SELECT step, value, wall_time FROM metrics WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step DESC LIMIT ?5");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last).bind(5, limit);
    while (s.step()) out.push_back({s.column_int(0), s.column_double_or_nan(1), s.column_double(2)});
    std::reverse(out.begin(), out.end());
    return out;
}

std::vector<std::string> Reader::rank_keys(int64_t run, int64_t limit) { return key_names(run, "rank_metrics", limit); }

Reader::RankSeries Reader::rank_series(int64_t run, const std::string& key, int64_t max_points) {
    RankSeries out;
    auto key_ = key_id(key);
    if (!key_) return out;
    Statement last = db_.prepare("SELECT max(step) FROM rank_metrics WHERE run_id = ?1 AND key_id = ?2");
    last.bind(1, run).bind(2, *key_);
    max_points = std::max<int64_t>(1, max_points);
    if (last.step()) out.stride = std::max<int64_t>(1, (last.column_int(0) + max_points) / max_points);
    Statement s = db_.prepare("SELECT rank, step, value, wall_time FROM rank_metrics WHERE run_id = ?1 AND "
                              "key_id = ?2 AND step % ?3 = 0 ORDER BY rank, step");
    s.bind(1, run).bind(2, *key_).bind(3, out.stride);
    while (s.step())
        out.ranks[(int)s.column_int(0)].push_back({s.column_int(1), s.column_double_or_nan(2), s.column_double(3)});
    return out;
}

namespace {

// Accumulates points or block summaries into one bucket.
struct BucketBuilder {
    Bucket b{0, 0, INFINITY, -INFINITY, NAN, false, NAN, NAN, NAN};
    bool empty = true;
    double sum = 0.0;
    int64_t n = 0;  // values in sum (NaN never is)
    bool numbers = false;  // some value other than NaN came (an Inf is one: min == INFINITY is no sign of none)

    // A raw point, or a whole block: its step range, summary and wall times.
    void add(int64_t first_step, int64_t last_step, double min, double max, double last, bool has_nan,
             double block_sum, int64_t values, double first_time, double last_time) {
        if (empty || first_step < b.first_step) {
            b.first_step = first_step;
            b.first_time = first_time;
        }
        empty = false;
        if (!std::isnan(min)) b.min = std::min(b.min, min), numbers = true;
        if (!std::isnan(max)) b.max = std::max(b.max, max);
        b.has_nan = b.has_nan || has_nan;
        if (values > 0) sum += block_sum, n += values;
        if (last_step >= b.last_step) {
            b.last_step = last_step;
            b.last = last;
            b.last_time = last_time;
        }
    }
    void add_point(const SeriesPoint& p) {
        bool nan = std::isnan(p.value);
        add(p.step, p.step, p.value, p.value, p.value, nan, nan ? 0.0 : p.value, nan ? 0 : 1, p.wall_time, p.wall_time);
    }
    Bucket finish() {
        if (!numbers) b.min = b.max = NAN;  // only NaN in the bucket
        if (n > 0) b.mean = sum / (double)n;
        return b;
    }
};

}  // namespace

std::vector<Bucket> Reader::downsample(int64_t run, const std::string& key, int64_t first, int64_t last,
                                       int buckets) {
    std::vector<Bucket> out;
    auto key_ = key_id(key);
    if (!key_ || buckets <= 0 || last < first) return out;
    // Narrow the range to the steps the series has, so an open-ended request
    // ("to the end") is bucketed over the data, not over the empty remainder.
    // Two queries, each one index seek: min() and max() together would scan.
    const char* ends[] = {"SELECT step FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?3 AND ?4 "
                          "ORDER BY step ASC LIMIT 1",
                          "SELECT step FROM metrics WHERE run_id = ?1 AND key_id = ?2 AND step BETWEEN ?3 AND ?4 "
                          "ORDER BY step DESC LIMIT 1"};
    int64_t bounds[2];
    for (int i = 0; i < 2; i++) {
        Statement s = db_.prepare(ends[i]);
        s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last);
        if (!s.step()) return out;
        bounds[i] = s.column_int(0);
    }
    first = bounds[0];
    last = bounds[1];
    int64_t span = last - first + 1;
    int64_t width = (span + buckets - 1) / buckets;
    bool use_blocks = width >= kBlockSteps;
    if (use_blocks) width = (width + kBlockSteps - 1) / kBlockSteps * kBlockSteps;
    // Buckets are aligned to multiples of width (so, with blocks, to block
    // boundaries); the first and last may be partly outside [first, last].
    int64_t origin = first / width * width;
    // Alignment can add a bucket. Then the width that fits is computed, not
    // searched for: a step by step search ran first_step / 64 times (days at
    // steps near 9e15). With w >= (last - first) / (buckets - 1), the aligned
    // buckets from first to last number at most buckets; one bucket needs an
    // origin of 0, so w > last.
    if ((last - origin) / width + 1 > buckets) {
        const int64_t unit = use_blocks ? kBlockSteps : 1;
        const int64_t needed = buckets > 1 ? (last - first + buckets - 2) / (buckets - 1) : last + 1;
        width = std::max(width + unit, (needed + unit - 1) / unit * unit);
        origin = first / width * width;
    }
    std::vector<BucketBuilder> acc((last - origin) / width + 1);
    auto add_point = [&](const SeriesPoint& p) { acc[(p.step - origin) / width].add_point(p); };
    if (!use_blocks) {
        for (const SeriesPoint& p : series(run, key, first, last)) add_point(p);
    } else {
        // Whole blocks inside the range from metric_blocks, the ragged ends from metrics.
        int64_t first_block = (first + kBlockSteps - 1) / kBlockSteps;
        int64_t last_block = (last + 1) / kBlockSteps - 1;
        if (first_block > last_block) {
            for (const SeriesPoint& p : series(run, key, first, last)) add_point(p);
        } else {
            for (const SeriesPoint& p : series(run, key, first, first_block * kBlockSteps - 1)) add_point(p);
            Statement s = db_.prepare(
                "SELECT block, min_value, max_value, last_step, last_value, has_nan, sum_value, n_values, first_time, "
                "last_time FROM metric_blocks "
                "WHERE run_id = ?1 AND key_id = ?2 AND block BETWEEN ?3 AND ?4 ORDER BY block");
            s.bind(1, run).bind(2, *key_).bind(3, first_block).bind(4, last_block);
            while (s.step()) {
                int64_t block_start = s.column_int(0) * kBlockSteps;
                acc[(block_start - origin) / width].add(
                    block_start, s.column_int(3), s.column_double_or_nan(1), s.column_double_or_nan(2),
                    s.column_double_or_nan(4), s.column_int(5) != 0, s.column_double_or_nan(6), s.column_int(7),
                    s.column_double_or_nan(8), s.column_double_or_nan(9));
            }
            for (const SeriesPoint& p : series(run, key, (last_block + 1) * kBlockSteps, last))
                add_point(p);
        }
    }
    for (BucketBuilder& b : acc)
        if (!b.empty) out.push_back(b.finish());
    return out;
}

std::optional<int64_t> Reader::last_step(int64_t run, const std::string& key) {
    auto key_ = key_id(key);
    if (!key_) return std::nullopt;
    Statement s = db_.prepare("SELECT step FROM metrics WHERE run_id = ?1 AND key_id = ?2 ORDER BY step DESC LIMIT 1");
    s.bind(1, run).bind(2, *key_);
    if (!s.step()) return std::nullopt;
    return s.column_int(0);
}

std::vector<Event> Reader::events(int64_t run) {
    std::vector<Event> out;
    Statement s = db_.prepare("SELECT kind, step, wall_time, detail FROM events WHERE run_id = ?1 ORDER BY wall_time, id");
    s.bind(1, run);
    while (s.step()) out.push_back({s.column_text(0), s.column_int(1), s.column_double(2), s.column_text(3)});
    return out;
}

std::vector<int64_t> Reader::event_ids_of(int64_t run, const std::vector<std::string>& kinds, int64_t first_step) {
    std::vector<int64_t> out;
    if (kinds.empty()) return out;
    std::string marks;
    for (size_t i = 0; i < kinds.size(); i++) marks += fmt::format(",?{}", i + 3);
    Statement s = db_.prepare("SELECT id FROM events WHERE run_id = ?1 AND step >= ?2 AND kind IN (" + marks.substr(1) +
                              ") ORDER BY step, wall_time, id");
    s.bind(1, run).bind(2, first_step);
    for (size_t i = 0; i < kinds.size(); i++) s.bind((int)i + 3, kinds[i]);
    while (s.step()) out.push_back(s.column_int(0));
    return out;
}

std::vector<Event> Reader::events_by_id(const std::vector<int64_t>& ids) {
    std::vector<Event> out;
    out.reserve(ids.size());
    Statement s = db_.prepare("SELECT kind, step, wall_time, detail FROM events WHERE id = ?1");
    for (int64_t id : ids) {
        s.bind(1, id);
        if (s.step()) out.push_back({s.column_text(0), s.column_int(1), s.column_double(2), s.column_text(3)});
        s.reset();
    }
    return out;
}

std::vector<Event> Reader::events_page(int64_t run, int64_t offset, int64_t limit, size_t max_detail, int64_t* total) {
    std::vector<Event> out;
    Statement count = db_.prepare("SELECT count(*) FROM events WHERE run_id = ?1");
    count.bind(1, run);
    count.step();
    *total = count.column_int(0);
    // substr in SQL: a detail of megabytes is cut before it is copied out.
    Statement s = db_.prepare("SELECT kind, step, wall_time, CASE WHEN ?4 > 0 THEN substr(detail, 1, ?4) ELSE detail "
                              "END FROM events WHERE run_id = ?1 ORDER BY wall_time, id LIMIT ?2 OFFSET ?3");
    s.bind(1, run).bind(2, limit).bind(3, offset).bind(4, (int64_t)max_detail);
    while (s.step()) out.push_back({s.column_text(0), s.column_int(1), s.column_double(2), s.column_text(3)});
    return out;
}

static Alert alert_from_row(Statement& s) {
    return {s.column_text(0), s.column_text(1), s.column_int(2), s.column_text(3), s.column_text(4),
            s.column_double(5)};
}

std::vector<Alert> Reader::latest_alerts(int64_t run, int64_t limit) {
    std::vector<Alert> out;
    Statement s = db_.prepare("SELECT kind, severity, step, message, data, wall_time FROM alerts WHERE run_id = ?1 "
                              "ORDER BY id DESC LIMIT ?2");
    s.bind(1, run).bind(2, limit);
    while (s.step()) out.push_back(alert_from_row(s));
    std::reverse(out.begin(), out.end());
    return out;
}

int64_t Reader::alert_count(int64_t run) {
    Statement s = db_.prepare("SELECT count(*) FROM alerts WHERE run_id = ?1");
    s.bind(1, run);
    s.step();
    return s.column_int(0);
}

void Reader::for_each_alert(int64_t run, int64_t first_step, const std::function<void(const Alert&)>& visit) {
    Statement s = db_.prepare("SELECT kind, severity, step, message, data, wall_time FROM alerts WHERE run_id = ?1 "
                              "AND step >= ?2 ORDER BY step, id");
    s.bind(1, run).bind(2, first_step);
    while (s.step()) visit(alert_from_row(s));
}

std::vector<Alert> Reader::alerts_after(int64_t run, int64_t* after_id) {
    std::vector<Alert> out;
    Statement s = db_.prepare("SELECT kind, severity, step, message, data, wall_time, id FROM alerts WHERE id > ?2 "
                              "AND run_id = ?1 ORDER BY id LIMIT 1000");
    s.bind(1, run).bind(2, *after_id);
    while (s.step()) {
        out.push_back(alert_from_row(s));
        *after_id = s.column_int(6);
    }
    return out;
}

int64_t Reader::newest_alert_id(int64_t run) {
    Statement s = db_.prepare("SELECT max(id) FROM alerts WHERE run_id = ?1");
    s.bind(1, run);
    if (!s.step() || s.column_is_null(0)) return 0;
    return s.column_int(0);
}

std::vector<Alert> Reader::alerts(int64_t run) {
    std::vector<Alert> out;
    Statement s = db_.prepare("SELECT kind, severity, step, message, data, wall_time FROM alerts WHERE run_id = ?1 "
                              "ORDER BY id");
    s.bind(1, run);
    while (s.step()) out.push_back(alert_from_row(s));
    return out;
}

std::vector<CheckpointRecord> Reader::checkpoints(int64_t run) {
    std::vector<CheckpointRecord> out;
    Statement s = db_.prepare("SELECT step, path, wall_time FROM checkpoints WHERE run_id = ?1 ORDER BY step");
    s.bind(1, run);
    while (s.step()) out.push_back({s.column_int(0), s.column_text(1), s.column_double(2)});
    return out;
}

std::optional<BatchRecord> Reader::batch(int64_t run, int64_t step) {
    Statement s = db_.prepare("SELECT step, data, wall_time FROM batches WHERE run_id = ?1 AND step = ?2");
    s.bind(1, run).bind(2, step);
    if (!s.step()) return std::nullopt;
    return BatchRecord{s.column_int(0), s.column_text(1), s.column_double(2)};
}

std::vector<DocumentRecord> Reader::documents(int64_t run, const std::vector<int64_t>& refs) {
    std::vector<DocumentRecord> out;
    Statement s = db_.prepare("SELECT ref, doc_id, source, byte_offset FROM documents WHERE run_id = ?1 AND ref = ?2");
    for (int64_t ref : refs) {
        s.bind(1, run).bind(2, ref);
        if (s.step()) out.push_back({s.column_int(0), s.column_text(1), s.column_text(2), s.column_int(3)});
        s.reset();
    }
    return out;
}

std::vector<EvalRecord> Reader::evals(int64_t run) {
    std::vector<EvalRecord> out;
    Statement s = db_.prepare("SELECT step, task, metric, value, wall_time, tokens FROM evals WHERE run_id = ?1 "
                              "ORDER BY step, task, metric");
    s.bind(1, run);
    while (s.step())
        out.push_back({s.column_int(0), s.column_text(1), s.column_text(2), s.column_double_or_nan(3), s.column_double(4),
                       s.column_int(5)});
    return out;
}

std::optional<std::string> Reader::pending_halt(int64_t run) {
    Statement s = db_.prepare("SELECT requested_by FROM halt_requests WHERE run_id = ?1 AND handled_at = 0 "
                              "ORDER BY id LIMIT 1");
    s.bind(1, run);
    if (!s.step()) return std::nullopt;
    return s.column_text(0);
}

Reader::Activity Reader::last_activity(int64_t run) {
    Activity a;
    if (auto loss = key_id("loss")) {
        // The newest row of one key: an index seek on (run, key, step), not a scan.
        Statement m = db_.prepare("SELECT wall_time, step FROM metrics WHERE run_id = ?1 AND key_id = ?2 "
                                  "ORDER BY step DESC LIMIT 1");
        m.bind(1, run).bind(2, *loss);
        if (m.step()) a = {m.column_double(0), m.column_int(1)};
    }
    Statement e = db_.prepare("SELECT max(wall_time) FROM events WHERE run_id = ?1");
    e.bind(1, run);
    if (e.step() && !e.column_is_null(0)) a.wall_time = std::max(a.wall_time, e.column_double(0));
    return a;
}

// Events that end a stretch of training: the run stopped, died, was halted,
// or (fed from outside) went silent.
static bool ends_segment(const std::string& kind) {
    return kind == "stop" || kind == "crash" || kind == "halt" || kind == "stale";
}

namespace {

struct Moment {
    bool opens, restart, ends;
    double wall_time;
};

// The newest time in `sorted_times` before `limit`, or `fallback` when none is.
double newest_before(const std::vector<double>& sorted_times, double after, double limit, double fallback) {
    auto it = std::lower_bound(sorted_times.begin(), sorted_times.end(), limit);
    if (it == sorted_times.begin()) return fallback;
    const double t = *std::prev(it);
    return t >= after ? std::max(fallback, t) : fallback;
}

}  // namespace

// The events' kinds and times only (a detail may be megabytes), and, when a
// segment ended without a word, the metric blocks' times read once for every
// such segment (a scan of the run's metrics per segment took seconds): a
// segment cut by SIGKILL ends at its newest block's time, to within the
// steps of one block (64) written after it in the same block.
Uptime Reader::uptime(int64_t run) {
    Uptime u;
    std::vector<Moment> ev;
    Statement e = db_.prepare("SELECT kind, wall_time FROM events WHERE run_id = ?1 ORDER BY wall_time, id");
    e.bind(1, run);
    while (e.step()) {
        const std::string kind = e.column_text(0);
        ev.push_back({kind == "start" || kind == "restart", kind == "restart", ends_segment(kind), e.column_double(1)});
    }
    std::optional<std::vector<double>> block_times;
    double first_start = -1.0, last_end = -1.0;
    for (size_t i = 0; i < ev.size(); i++) {
        if (!ev[i].opens) continue;
        if (first_start < 0) first_start = ev[i].wall_time;
        if (ev[i].restart) u.restarts++;
        double end = ev[i].wall_time;
        size_t j = i + 1;
        for (; j < ev.size() && !ev[j].opens; j++) {
            end = ev[j].wall_time;
            if (ev[j].ends) break;
        }
        if (!(j < ev.size() && ev[j].ends)) {
            if (!block_times) block_times = metric_block_times(run);
            const double limit = j < ev.size() ? ev[j].wall_time : std::numeric_limits<double>::max();
            end = newest_before(*block_times, ev[i].wall_time, limit, end);
        }
        u.training_seconds += end - ev[i].wall_time;
        u.segments.push_back({ev[i].wall_time, end});
        last_end = std::max(last_end, end);
    }
    if (first_start >= 0) {
        u.wall_seconds = last_end - first_start;
        u.ratio = u.wall_seconds > 0 ? u.training_seconds / u.wall_seconds : 1.0;
    }
    return u;
}

std::vector<double> Reader::metric_block_times(int64_t run) {
    std::vector<double> out;
    Statement s = db_.prepare("SELECT first_time, last_time FROM metric_blocks WHERE run_id = ?1");
    s.bind(1, run);
    while (s.step())
        for (int c = 0; c < 2; c++)
            if (!s.column_is_null(c)) out.push_back(s.column_double(c));
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace hlat::telemetry
