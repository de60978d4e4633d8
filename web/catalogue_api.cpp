#include "web/catalogue_api.h"

#include "telemetry/metric_catalogue.h"
#include "telemetry/untrusted_text.h"
#include "web/json_reply.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sstream>

namespace hlat::web {

using json = nlohmann::json;
using namespace hlat::telemetry;

namespace {

json entry_json(const MetricEntry& e) {
    return {{"title", e.title}, {"unit", e.unit},   {"group", e.group},
            {"panel", e.panel}, {"shown", e.shown}, {"derived", e.derived}};
}

json row_json(const MetricEntry& e) {
    json j = entry_json(e);
    j["key"] = e.key;
    j["per_rank"] = e.per_rank;
    return j;
}

// Each key's entry and the charts they make: what the page draws from.
json entries_and_panels(const std::vector<std::string>& keys, const std::vector<std::string>& rank_keys) {
    json metrics = json::object(), rank_metrics = json::object(), panels = json::array();
    for (const std::string& k : keys) metrics[k] = entry_json(catalogue_entry(k, false));
    for (const std::string& k : rank_keys) rank_metrics[k] = entry_json(catalogue_entry(k, true));
    for (const PanelLayout& p : catalogue_layout(keys, rank_keys))
        panels.push_back({{"id", p.id}, {"title", p.title}, {"unit", p.unit}, {"shade", p.shade},
                          {"per_rank", p.per_rank}, {"keys", p.keys}});
    return {{"metrics", metrics}, {"rank_metrics", rank_metrics}, {"panels", panels}};
}

// A comma-separated list of metric keys from the query, each checked as a
// stored key would be; `count` carries the total over lists against the cap.
std::vector<std::string> key_list(const Request& r, const char* name, size_t& count) {
    std::vector<std::string> out;
    auto it = r.query.find(name);
    if (it == r.query.end()) return out;
    std::stringstream list(it->second);
    for (std::string k; std::getline(list, k, ',');) {
        if (k.empty()) continue;
        if (++count > kMaxCatalogueKeys)
            throw BadRequest(fmt::format("keys and rank_keys may name at most {} keys in all", kMaxCatalogueKeys));
        check_name(k, "metric key");
        out.push_back(k);
    }
    return out;
}

}  // namespace

Response catalogue_reply(const Request& r) {
    size_t count = 0;
    std::vector<std::string> keys = key_list(r, "keys", count), rank_keys = key_list(r, "rank_keys", count);
    json table = json::array(), shared = json::array();
    for (const MetricEntry& e : metric_catalogue()) table.push_back(row_json(e));
    for (const Panel& p : catalogue_panels()) shared.push_back({{"id", p.id}, {"title", p.title}, {"shade", p.shade}});
    json out = {{"table", table}, {"shared_panels", shared}, {"rule", derivation_rule()}};
    if (count > 0) out.update(entries_and_panels(keys, rank_keys));
    return reply(200, out);
}

Response keys_reply(Reader& reader, int64_t run, const Request& r) {
    // At most `limit` keys by name (a run with 100,000 keys made a 37 MB
    // reply, ~500 MB to build); "total" says how many there are.
    const int64_t limit = int_param(r, "limit", 5000, 1, 100000);
    std::vector<std::string> keys = reader.keys(run, limit), rank_keys = reader.rank_keys(run, limit);
    const int64_t total = keys.size() < (size_t)limit ? (int64_t)keys.size() : reader.key_count(run);
    json out = {{"keys", keys}, {"rank_keys", rank_keys}, {"total", total}, {"truncated", total > (int64_t)keys.size()}};
    out.update(entries_and_panels(keys, rank_keys));
    json vectors = json::array();
    for (const std::string& key : reader.vector_keys(run)) {
        const HeatmapEntry e = heatmap_entry(key);
        vectors.push_back({{"key", key}, {"title", e.title}, {"unit", e.unit}, {"reduce", e.reduce},
                           {"log_scale", e.log_scale}, {"elements", reader.vector_labels(run, key).size()}});
    }
    out["vectors"] = std::move(vectors);
    return reply(200, out);
}

}  // namespace hlat::web
