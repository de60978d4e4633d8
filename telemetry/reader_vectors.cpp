// Reading statistics over layers, heads or tensors: one row per step holding a
// float32 vector (schema.cpp, version 6), the element names per run.
#include "telemetry/reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace hlat::telemetry {

std::vector<std::string> Reader::vector_keys(int64_t run) { return key_names(run, "vectors"); }

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

std::vector<VectorPoint> Reader::vector_series(int64_t run, const std::string& key, int64_t first, int64_t last) {
    std::vector<VectorPoint> out;
    auto key_ = key_id(key);
    if (!key_) return out;
    auto labels = std::make_shared<const std::vector<std::string>>(vector_labels(run, key));
    Statement s = db_.prepare("SELECT step, wall_time, data FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last);
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

// One bucket's running reduction of each element.
struct BucketSums {
    std::vector<float> value;
    std::vector<int> count;  // finite values seen, per element
    void reset(size_t n) {
        value.assign(n, NAN);
        count.assign(n, 0);
    }
    void add(const std::vector<float>& row, Reduce reduce) {
        const size_t n = std::min(row.size(), value.size());
        for (size_t i = 0; i < n; i++) {
            const float x = row[i];
            if (!std::isfinite(x)) continue;
            float& v = value[i];
            if (count[i]++ == 0) v = x;
            else if (reduce == Reduce::Max) v = std::max(v, x);
            else if (reduce == Reduce::Min) v = std::min(v, x);
            else if (reduce == Reduce::Mean) v += x;
            else v = x;
        }
    }
    void finish(Reduce reduce) {
        if (reduce != Reduce::Mean) return;
        for (size_t i = 0; i < value.size(); i++)
            if (count[i] > 0) value[i] /= (float)count[i];
    }
};

}  // namespace

Heatmap Reader::heatmap(int64_t run, const std::string& key, int64_t first, int64_t last, int buckets,
                        Reduce reduce) {
    Heatmap out;
    auto key_ = key_id(key);
    if (!key_ || first > last) return out;
    out.labels = vector_labels(run, key);
    Statement range = db_.prepare("SELECT min(step), max(step) FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                                  "AND step BETWEEN ?3 AND ?4");
    range.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last);
    if (!range.step() || range.column_is_null(0)) return out;
    first = range.column_int(0), last = range.column_int(1);
    const int64_t width = std::max<int64_t>(1, (last - first + buckets) / std::max(1, buckets));
    Statement s = db_.prepare("SELECT step, data FROM vectors WHERE run_id = ?1 AND key_id = ?2 "
                              "AND step BETWEEN ?3 AND ?4 ORDER BY step");
    s.bind(1, run).bind(2, *key_).bind(3, first).bind(4, last);
    const size_t n = out.labels.size();
    BucketSums sums;
    std::vector<float> row;
    int64_t bucket = -1;
    auto close_bucket = [&] {
        if (bucket < 0) return;
        sums.finish(reduce);
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
        sums.add(row, reduce);
    }
    close_bucket();
    return out;
}

}  // namespace hlat::telemetry
