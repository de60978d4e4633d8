// Reading statistics over layers, heads or tensors: one row per step holding a
// float32 vector (schema.cpp, version 6), the element names per run.
#include "telemetry/reader.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace hlat::telemetry {

std::vector<std::string> Reader::vector_keys(int64_t run) { return key_names(run, "vectors", 0); }

std::vector<std::string> Reader::vector_labels(int64_t run, const std::string& key) {
    std::vector<std::string> out;
    auto key_ = key_id(key);
    if (!key_) return out;
    Statement s = db_.prepare("SELECT labels FROM vector_labels WHERE run_id = ?1 AND key_id = ?2");
    s.bind(1, run).bind(2, *key_);
    if (s.step()) {
        nlohmann::json labels = nlohmann::json::parse(s.column_text(0), nullptr, false);
        if (labels.is_array())
            for (const auto& l : labels) out.push_back(l.is_string() ? l.get<std::string>() : l.dump());
        return out;
    }
    // No names stored: the elements are numbered, as many as the newest row has.
    Statement n = db_.prepare("SELECT length(data) / 4 FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                              "ORDER BY step DESC LIMIT 1");
    n.bind(1, run).bind(2, *key_);
    if (n.step())
        for (int64_t i = 0; i < n.column_int(0); i++) out.push_back(std::to_string(i));
    return out;
}

std::vector<VectorPoint> Reader::vector_series(int64_t run, const std::string& key, int64_t first, int64_t last,
                                               int64_t limit) {
    std::vector<VectorPoint> out;
    auto key_ = key_id(key);
    if (!key_) return out;
    auto labels = std::make_shared<const std::vector<std::string>>(vector_labels(run, key));
    Statement s = db_.prepare("SELECT step, wall_time, data FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step LIMIT ?5");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last).bind(5, limit > 0 ? limit : -1);
    while (s.step()) out.push_back({key, s.column_int(0), s.column_floats(2), s.column_double(1), labels});
    return out;
}

std::optional<int64_t> Reader::last_vector_step(int64_t run, const std::string& key) {
    auto key_ = key_id(key);
    if (!key_) return std::nullopt;
    Statement s = db_.prepare("SELECT max(step) FROM vectors WHERE run_id = ?1 AND key_id = ?2");
    s.bind(1, run).bind(2, *key_);
    if (!s.step() || s.column_is_null(0)) return std::nullopt;
    return s.column_int(0);
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One bucket's running reduction of each element, over finite values only.
// Branch-free per element so the compiler vectorises it: a heatmap of 64
// elements over 100,000 steps folds 6.4M values per request.
struct BucketSums {
    Reduce reduce = Reduce::Max;
    std::vector<float> value;
    std::vector<int> count;  // finite values seen, per element (mean only)
    void reset(size_t n) {
        value.assign(n, reduce == Reduce::Max ? -kInf : reduce == Reduce::Min ? kInf : reduce == Reduce::Mean ? 0.0f : NAN);
        if (reduce == Reduce::Mean) count.assign(n, 0);
    }
    void add(const float* row, size_t n) {
        n = std::min(n, value.size());
        float* v = value.data();
        switch (reduce) {
        case Reduce::Max:
            for (size_t i = 0; i < n; i++) v[i] = std::fabs(row[i]) <= FLT_MAX && row[i] > v[i] ? row[i] : v[i];
            break;
        case Reduce::Min:
            for (size_t i = 0; i < n; i++) v[i] = std::fabs(row[i]) <= FLT_MAX && row[i] < v[i] ? row[i] : v[i];
            break;
        case Reduce::Last:
            for (size_t i = 0; i < n; i++) v[i] = std::fabs(row[i]) <= FLT_MAX ? row[i] : v[i];
            break;
        case Reduce::Mean:
            for (size_t i = 0; i < n; i++) {
                const bool ok = std::fabs(row[i]) <= FLT_MAX;
                v[i] += ok ? row[i] : 0.0f;
                count[i] += ok;
            }
            break;
        }
    }
    // Elements without a finite value in the bucket become NaN.
    void finish() {
        for (size_t i = 0; i < value.size(); i++) {
            float& v = value[i];
            if (reduce == Reduce::Mean) v = count[i] > 0 ? v / (float)count[i] : NAN;
            else if (std::isinf(v)) v = NAN;  // never a value: non-finite ones are skipped
        }
    }
};

// The first (or last) step a key has in [first, last]: one seek down the
// primary key, where min() and max() together would scan every row.
std::optional<int64_t> end_step(Database& db, int64_t run, int64_t key, int64_t first, int64_t last, bool newest) {
    Statement s = db.prepare(fmt::format("SELECT step FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                                         "AND step BETWEEN ?3 AND ?4 ORDER BY step {} LIMIT 1",
                                         newest ? "DESC" : "ASC"));
    s.bind(1, run).bind(2, key).bind(3, first).bind(4, last);
    if (!s.step()) return std::nullopt;
    return s.column_int(0);
}

}  // namespace

Heatmap Reader::heatmap(int64_t run, const std::string& key, int64_t first, int64_t last, int buckets,
                        Reduce reduce) {
    Heatmap out;
    auto key_ = key_id(key);
    if (!key_ || first > last) return out;
    out.labels = vector_labels(run, key);
    auto lo = end_step(db_, run, *key_, first, last, false), hi = end_step(db_, run, *key_, first, last, true);
    if (!lo || !hi) return out;
    first = *lo, last = *hi;
    const int64_t width = std::max<int64_t>(1, (last - first + buckets) / std::max(1, buckets));
    Statement s = db_.prepare("SELECT step, data FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last);
    const size_t n = out.labels.size();
    BucketSums sums;
    sums.reduce = reduce;
    std::vector<float> row;
    int64_t bucket = -1;
    auto close_bucket = [&] {
        if (bucket < 0) return;
        sums.finish();
        out.values.insert(out.values.end(), sums.value.begin(), sums.value.end());
    };
    while (s.step()) {
        const int64_t step = s.column_int(0);
        const int64_t b = (step - first) / width;
        if (b != bucket) {
            close_bucket();
            bucket = b;
            sums.reset(n);
            out.first_step.push_back(step);
            out.last_step.push_back(step);
        }
        out.last_step.back() = step;
        s.column_floats_into(1, row);
        sums.add(row.data(), row.size());
    }
    close_bucket();
    return out;
}

}  // namespace hlat::telemetry
