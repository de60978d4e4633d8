#include "web/series_api.h"

#include "telemetry/untrusted_text.h"
#include "web/json_reply.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

namespace hlat::web {

using json = nlohmann::json;
using namespace hlat::telemetry;

namespace {

const int64_t kMaxStep = std::numeric_limits<int64_t>::max() / 2;
const size_t kMaxEpisodes = 5000;  // a noisy series is shaded everywhere long before this
const int64_t kMaxPoints = 100000;  // points of one full-resolution series reply
const size_t kMaxCsvKeys = 64;
const int64_t kCsvWindow = 20000;   // points per key read for one piece of a CSV

std::string required(const Request& r, const std::string& name) {
    auto it = r.query.find(name);
    if (it == r.query.end() || it->second.empty()) throw BadRequest(fmt::format("parameter {} is required", name));
    return it->second;
}

// A metric key named by a parameter: 1 to 200 bytes of UTF-8 (400 otherwise,
// quoting at most 200 bytes of it).
std::string required_key(const Request& r, const std::string& name) {
    std::string key = required(r, name);
    check_name(key, "metric key");
    return key;
}

std::pair<int64_t, int64_t> step_range(const Request& r) {
    int64_t from = int_param(r, "from", 0, 0, kMaxStep), to = int_param(r, "to", kMaxStep, 0, kMaxStep);
    if (to < from) throw BadRequest(fmt::format("from={} is after to={}", from, to));
    return {from, to};
}

// CSV cell: a number as it was stored, "nan" and "inf"/"-inf" spelled out.
std::string csv_number(double v) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return fmt::format("{}", v);  // shortest text that reads back to the same double
}

}  // namespace

void SpikeEpisodeFinder::add(const SeriesPoint& p) {
    const bool spike = !std::isfinite(p.value) || (!recent_.empty() && p.value > sum_ / (double)recent_.size() + margin_);
    if (spike) {
        const double height = std::isnan(p.value) ? std::numeric_limits<double>::infinity() : p.value;
        if (!open_) out_.push_back({p.step, p.step, p.step, height});
        SpikeEpisode& e = out_.back();
        e.last_step = p.step;
        if (height > e.peak) e.peak = height, e.peak_step = p.step;
    }
    open_ = spike;
    if (std::isfinite(p.value)) {
        recent_.push_back(p.value);
        sum_ += p.value;
        if (recent_.size() > window_) sum_ -= recent_.front(), recent_.pop_front();
    }
}

std::vector<SpikeEpisode> spike_episodes(const std::vector<SeriesPoint>& points, size_t window, double margin) {
    SpikeEpisodeFinder finder(window, margin);
    for (const SeriesPoint& p : points) finder.add(p);
    return std::move(finder.episodes());
}

Response series_reply(Reader& reader, int64_t run, const Request& r) {
    std::string key = required_key(r, "key");
    auto [from, to] = step_range(r);
    if (r.query.count("points")) {
        int points = (int)int_param(r, "points", 0, 1, 100000);
        json buckets = json::array();
        for (const Bucket& b : reader.downsample(run, key, from, to, points))
            buckets.push_back({b.first_step, b.last_step, json_number(b.min), json_number(b.max), json_number(b.last),
                               b.has_nan, json_number(b.mean), json_number(b.first_time), json_number(b.last_time)});
        return reply(200, {{"key", key},
                           {"columns", {"first", "last", "min", "max", "value", "has_nan", "mean", "first_time",
                                        "last_time"}},
                           {"buckets", buckets}});
    }
    // At most kMaxPoints: past them, next_from says where the rest begins.
    std::vector<SeriesPoint> points = reader.series(run, key, from, to, kMaxPoints + 1);
    json next_from = nullptr;
    if ((int64_t)points.size() > kMaxPoints) next_from = points.back().step, points.pop_back();
    json rows = json::array();
    for (const SeriesPoint& p : points) rows.push_back({p.step, json_number(p.value), p.wall_time});
    return reply(200, {{"key", key}, {"columns", {"step", "value", "time"}}, {"points", rows}, {"next_from", next_from}});
}

Response rank_series_reply(Reader& reader, int64_t run, const Request& r) {
    std::string key = required_key(r, "key");
    Reader::RankSeries series = reader.rank_series(run, key, int_param(r, "points", 2000, 1, 100000));
    json ranks = json::object();
    for (const auto& [rank, pts] : series.ranks) {
        json rows = json::array();
        for (const SeriesPoint& p : pts) rows.push_back({p.step, json_number(p.value)});
        ranks[std::to_string(rank)] = rows;
    }
    return reply(200, {{"key", key}, {"stride", series.stride}, {"ranks", ranks}});
}

// The range's episodes, read a window at a time from a little before `from`
// (the 64 points before it give the threshold at `from` its history; an
// episode under way there starts at the earliest of them), stopping at
// kMaxEpisodes: it read every stored point from step 0.
Response episodes_reply(Reader& reader, int64_t run, const Request& r) {
    std::string key = required_key(r, "key");
    const auto [from, to] = step_range(r);
    const int64_t first = from;  // a lambda may not capture a structured binding (clang 14)
    SpikeEpisodeFinder finder;
    if (from > 0)
        for (const SeriesPoint& p : reader.series_newest(run, key, 0, from - 1, 64)) finder.add(p);
    std::vector<SpikeEpisode>& all = finder.episodes();
    auto in_range = [&] { return std::count_if(all.begin(), all.end(), [&](auto& e) { return e.last_step >= first; }); };
    for (int64_t cursor = from; cursor <= to && (size_t)in_range() <= kMaxEpisodes;) {
        std::vector<SeriesPoint> window = reader.series(run, key, cursor, to, kCsvWindow);
        for (const SeriesPoint& p : window) finder.add(p);
        if ((int64_t)window.size() < kCsvWindow) break;
        cursor = window.back().step + 1;
    }
    json episodes = json::array();
    for (const SpikeEpisode& e : all) {
        if (e.last_step < from) continue;
        if (episodes.size() == kMaxEpisodes) break;
        episodes.push_back({e.first_step, e.last_step, e.peak_step, json_number(e.peak)});
    }
    return reply(200, {{"key", key},
                       {"rule", "above the mean of the previous 20 finite values + 0.1, or not finite"},
                       {"columns", {"first", "last", "peak_step", "peak"}},
                       {"episodes", episodes},
                       {"truncated", episodes.size() == kMaxEpisodes}});
}

namespace {

std::vector<std::string> csv_keys(const Request& r) {
    std::vector<std::string> keys;
    std::stringstream list(required(r, "keys"));
    for (std::string k; std::getline(list, k, ',');)
        if (!k.empty()) keys.push_back(k);
    for (const std::string& k : keys) check_name(k, "metric key");
    if (keys.empty() || keys.size() > kMaxCsvKeys)
        throw BadRequest(fmt::format("keys must name 1 to {} metric keys", kMaxCsvKeys));
    return keys;
}

// Reads a CSV a window at a time: each key's next kCsvWindow points from
// the cursor, rows up to the first step where some key's window ends.
class CsvPieces {
  public:
    CsvPieces(const std::string& store, int64_t run, std::vector<std::string> keys, int64_t from, int64_t to)
        : reader_(std::make_shared<Reader>(store)), run_(run), keys_(std::move(keys)), cursor_(from), to_(to) {}

    std::optional<std::string> operator()() {
        if (cursor_ > to_) return std::nullopt;
        // step -> (wall time of its first point, one value per key)
        std::map<int64_t, std::pair<double, std::vector<std::string>>> rows;
        int64_t end = to_;
        for (size_t i = 0; i < keys_.size(); i++) {
            auto points = reader_->series(run_, keys_[i], cursor_, end, kCsvWindow);
            if ((int64_t)points.size() == kCsvWindow) end = points.back().step;
            for (const SeriesPoint& p : points) {
                if (p.step > end) break;
                auto [it, added] = rows.try_emplace(p.step, p.wall_time, std::vector<std::string>(keys_.size()));
                it->second.second[i] = csv_number(p.value);
            }
        }
        // A key read before `end` shrank may hold rows past it: they come with the next piece.
        rows.erase(rows.upper_bound(end), rows.end());
        cursor_ = end + 1;
        if (rows.empty()) return std::nullopt;
        std::string out;
        for (const auto& [step, row] : rows) {
            out += fmt::format("{},{}", step, csv_number(row.first));
            for (const std::string& v : row.second) out += "," + v;
            out += "\n";
        }
        return out;
    }

  private:
    std::shared_ptr<Reader> reader_;  // shared: a std::function is copyable
    int64_t run_;
    std::vector<std::string> keys_;
    int64_t cursor_, to_;
};

}  // namespace

Response csv_reply(const std::string& store, int64_t run, const Request& r) {
    std::vector<std::string> keys = csv_keys(r);
    auto [from, to] = step_range(r);
    std::string head = "step,time";
    for (const std::string& k : keys) head += "," + k;  // keys never hold commas: the API lists them split on ','
    Response out{200, "text/csv; charset=utf-8", head + "\n"};
    out.more = CsvPieces(store, run, std::move(keys), from, to);
    return out;
}
}  // namespace hlat::web
