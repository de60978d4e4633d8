#include "web/heatmap_api.h"

#include "telemetry/metric_catalogue.h"
#include "telemetry/untrusted_text.h"
#include "web/json_reply.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace hlat::web {

using namespace hlat::telemetry;

namespace {

const int64_t kMaxStep = std::numeric_limits<int64_t>::max() / 2;
constexpr int64_t kMaxBuckets = 10000;

Reduce reduce_of(const std::string& name) {
    if (name == "max") return Reduce::Max;
    if (name == "min") return Reduce::Min;
    if (name == "mean") return Reduce::Mean;
    if (name == "last") return Reduce::Last;
    throw BadRequest(fmt::format("reduce is max, min, mean or last, not {}", excerpt(name, 40)));
}

// The cells written by hand: 64 layers x 2,000 buckets is 128,000 numbers,
// and a JSON tree of them costs more than the query. Each number by
// std::to_chars (as %.6g) into the buffer, without a format string per cell.
void append_number(fmt::memory_buffer& out, float v) {
    char text[32];
    auto end = std::isfinite(v) ? std::to_chars(text, text + sizeof text, v, std::chars_format::general, 6).ptr
                                : std::copy_n("null", 4, text);
    out.append(text, end);
}

void append_cells(fmt::memory_buffer& out, const Heatmap& h) {
    const size_t n = h.labels.size();
    out.reserve(out.size() + h.buckets() * (24 + n * 9));
    fmt::format_to(std::back_inserter(out), ",\"steps\":[");
    for (size_t b = 0; b < h.buckets(); b++)
        fmt::format_to(std::back_inserter(out), "{}[{},{}]", b ? "," : "", h.first_step[b], h.last_step[b]);
    fmt::format_to(std::back_inserter(out), "],\"values\":[");
    for (size_t b = 0; b < h.buckets(); b++) {
        if (b) out.push_back(',');
        out.push_back('[');
        for (size_t i = 0; i < n; i++) {
            if (i) out.push_back(',');
            append_number(out, b * n + i < h.values.size() ? h.values[b * n + i] : NAN);
        }
        out.push_back(']');
    }
    out.push_back(']');
}

}  // namespace

Response heatmap_reply(Reader& reader, int64_t run, const Request& r) {
    auto key_param = r.query.find("key");
    if (key_param == r.query.end() || key_param->second.empty()) throw BadRequest("parameter key is required");
    const std::string& key = key_param->second;
    check_name(key, "metric key");
    const int64_t buckets = int_param(r, "buckets", 2000, 1, kMaxBuckets);
    const int64_t from = int_param(r, "from", 0, 0, kMaxStep), to = int_param(r, "to", kMaxStep, 0, kMaxStep);
    if (to < from) throw BadRequest(fmt::format("from={} is after to={}", from, to));
    const HeatmapEntry entry = heatmap_entry(key);
    auto reduce_param = r.query.find("reduce");
    const std::string reduce = reduce_param == r.query.end() ? entry.reduce : reduce_param->second;
    const Heatmap h = reader.heatmap(run, key, from, to, (int)buckets, reduce_of(reduce));
    if (h.labels.empty()) return error(404, fmt::format("the run has no statistic {}", excerpt(key, 100)));
    nlohmann::json head = {{"key", key},       {"title", entry.title},         {"unit", entry.unit},
                           {"reduce", reduce}, {"log_scale", entry.log_scale}, {"labels", h.labels}};
    std::string text = safe_dump(head);
    fmt::memory_buffer out;
    out.append(text.data(), text.data() + text.size() - 1);  // the object left open for the cells
    append_cells(out, h);
    out.push_back('}');
    return {200, "application/json", fmt::to_string(out)};
}

}  // namespace hlat::web
