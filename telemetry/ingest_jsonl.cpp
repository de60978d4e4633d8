// The line parser's JSONL records (docs/external-trainers.md): values, a
// trainer's alerts, statistics over layers, heads or tensors, batch ids, and
// the bare NaN and Infinity Python's json.dumps writes.
#include "telemetry/ingest_record.h"

#include "telemetry/jsonl_fast.h"
#include "telemetry/log_text.h"
#include "telemetry/untrusted_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

namespace hlat::telemetry {
namespace {

// Python's json.dumps writes NaN, Infinity and -Infinity bare, which is not
// JSON: outside strings they become the strings "nan", "inf" and "-inf".
std::string quote_bare_nonfinite(std::string_view line) {
    std::string out;
    out.reserve(line.size() + 8);
    bool in_string = false;
    for (size_t i = 0; i < line.size(); i++) {
        char c = line[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < line.size()) out += line[++i];
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        bool word_start = i == 0 || !std::isalnum((unsigned char)line[i - 1]);
        auto bare = [&](std::string_view word) {
            return word_start && line.substr(i, word.size()) == word &&
                   (i + word.size() == line.size() || !std::isalnum((unsigned char)line[i + word.size()]));
        };
        if (bare("NaN")) {
            out += "\"nan\"";
            i += 2;
        } else if (bare("-Infinity")) {
            out += "\"-inf\"";
            i += 8;
        } else if (bare("Infinity")) {
            out += "\"inf\"";
            i += 7;
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace

// {"step": N, "alert": TITLE, "text": TEXT, "level": "info|warning|critical"}:
// a trainer's own alert (the client's run.alert, as wandb.alert), an event of
// kind "alert" whose detail is {"title", "text", "level"} as JSON. "warn" and
// "error" are read as warning and critical.
namespace {
template <typename Bad>
void take_alert(const nlohmann::json& j, LineParser::Record& r, const Bad& bad) {
    auto text = [&](const char* key, const char* otherwise) {
        if (!j.contains(key) || j[key].is_null()) return std::string(otherwise);
        if (!j[key].is_string()) throw bad(fmt::format("an alert's \"{}\" must be a string", key));
        return j[key].get<std::string>();
    };
    std::string title = text("alert", ""), level = text("level", "warning");
    if (title.empty()) throw bad("an alert needs a title: {\"step\": N, \"alert\": TITLE, \"text\": ...}");
    if (level == "warn") level = "warning";
    if (level == "error") level = "critical";
    if (level != "info" && level != "warning" && level != "critical")
        throw bad(fmt::format("an alert's level is info, warning or critical, not {}", excerpt(level, 40)));
    r.event = "alert";
    r.detail = nlohmann::json{{"title", title.substr(0, 200)}, {"text", text("text", "").substr(0, 10000)},
                              {"level", level}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
}  // namespace


// A statistic over layers, heads or tensors (docs/internals.md): an object of
// name -> number (elements in natural order of their names: JSON objects
// keep none), a list of numbers (numbered), or a list of equal lists
// (flattened row-major, named "row.col"). null is NaN.
template <typename Bad>
VectorPoint LineParser::take_vector(const std::string& key, const nlohmann::json& j, const Bad& bad) {
    auto value_of = [&](const nlohmann::json& x, const std::string& where) -> double {
        double v;
        if (x.is_null()) return NAN;
        if (x.is_number()) return x.get<double>();
        if (x.is_string() && parse_number(x.get<std::string>(), &v)) return v;
        throw bad(fmt::format("field {} has {} at element {}, not a number", excerpt(key, 64), excerpt(safe_dump(x), 64, false),
                              excerpt(where, 64)));
    };
    std::vector<std::string> labels;
    std::vector<float> values;
    if (j.is_object()) {  // the common object lines take jsonl_fast.h's road, names remembered there
        for (auto it = j.begin(); it != j.end(); ++it) labels.push_back(it.key());
        std::sort(labels.begin(), labels.end(), natural_less);
        for (const std::string& l : labels) values.push_back((float)value_of(j.at(l), l));
    } else if (!j.empty() && j[0].is_array()) {
        for (size_t row = 0; row < j.size(); row++) {
            if (!j[row].is_array() || j[row].size() != j[0].size())
                throw bad(fmt::format("field {} is a list of lists of different lengths", excerpt(key, 64)));
            for (size_t col = 0; col < j[row].size(); col++) {
                labels.push_back(fmt::format("{}.{}", row, col));
                values.push_back((float)value_of(j[row][col], labels.back()));
            }
        }
    } else {
        for (size_t i = 0; i < j.size(); i++) values.push_back((float)value_of(j[i], std::to_string(i)));
        for (size_t i = 0; i < j.size(); i++) labels.push_back(std::to_string(i));
    }
    if (values.empty()) throw bad(fmt::format("field {} is an empty list or object", excerpt(key, 64)));
    auto& known = vector_labels_[key];  // the same names line after line: one copy, checked once
    if (!known || *known != labels) {
        check_names(key, labels, bad);
        known = std::make_shared<const std::vector<std::string>>(std::move(labels));
    }
    return {key, 0, std::move(values), 0.0, known};
}

template <typename Bad>
void LineParser::check_names(const std::string& key, const std::vector<std::string>& labels, const Bad& bad) {
    for (const std::string& l : labels) {
        try {
            check_name(l, "element name");
        } catch (const std::invalid_argument& e) {
            throw bad(fmt::format("field {}: {}", excerpt(key, 64), e.what()));
        }
    }
}

namespace {

// Whether a JSON value named batch holds batch ids (a string, or a list with
// a string in it) rather than a metric (a number, a list of numbers).
bool holds_batch_ids(const nlohmann::json& j) {
    if (j.is_string()) return true;
    return j.is_array() && std::any_of(j.begin(), j.end(), [](const nlohmann::json& x) { return x.is_string(); });
}

template <typename Bad>
std::vector<std::string> batch_ids_of(const nlohmann::json& j, const Bad& bad) {
    if (j.is_string()) return {j.get<std::string>()};
    std::vector<std::string> ids;
    for (size_t i = 0; i < j.size(); i++) {
        if (!j[i].is_string())
            throw bad(fmt::format("field \"batch\": batch id {} is {}, not a string (batch ids are strings: a hash of "
                                  "the batch's token ids, \"shard3:offset12345\")",
                                  i, excerpt(safe_dump(j[i]), 64, false)));
        ids.push_back(j[i].get<std::string>());
    }
    return ids;
}

}  // namespace

void LineParser::parse_jsonl(std::string_view line, long number, Record& r) {
    // The common shape, no DOM (jsonl_fast.h); batch ids under another name (--map) go the full way.
    if (fast_.read(line, fast_line_) && (!fast_line_.has_batch || rename("batch") == "batch")) {
        for (const auto& [key, value] : fast_line_.scalars) r.take(rename(key), value);
        for (VectorPoint& v : fast_line_.vectors) {
            v.key = rename(v.key);
            r.vectors.push_back(std::move(v));
        }
        if (fast_line_.has_batch) r.has_batch = true, r.batch = std::move(fast_line_.batch);
        return;
    }
    auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file_, number, why)); };
    if (json_depth(line) > kMaxJsonDepth) throw bad(fmt::format("nests arrays or objects more than {} deep", kMaxJsonDepth));
    nlohmann::json j = nlohmann::json::parse(quote_bare_nonfinite(line), nullptr, false);
    if (j.is_discarded()) throw bad("not valid JSON: " + excerpt(line));
    if (!j.is_object()) throw bad("not a JSON object");
    const bool alert = j.contains("alert") && j["alert"].is_string();  // a number named "alert" is a metric
    if (alert) take_alert(j, r, bad);
    for (auto it = j.begin(); it != j.end(); ++it) {
        double v;
        if (it->is_null()) continue;  // a missing value
        if (alert && (it.key() == "alert" || it.key() == "text" || it.key() == "level" || it.key() == "event" ||
                      it.key() == "detail"))
            continue;
        if ((it.key() == "event" || it.key() == "detail") && it->is_string()) {
            (it.key() == "event" ? r.event : r.detail) = it->get<std::string>();
            continue;
        }
        if (holds_batch_ids(*it) && rename(it.key()) == "batch") {
            r.has_batch = true, r.batch = batch_ids_of(*it, bad);
            continue;
        }
        if (it->is_object() || it->is_array()) {
            r.vectors.push_back(take_vector(rename(it.key()), *it, bad));
            continue;
        }
        if (it->is_number()) {
            v = it->get<double>();
        } else if (!(it->is_string() && parse_number(it->get<std::string>(), &v))) {
            throw bad(fmt::format("field {} is {}, not a number", excerpt(it.key(), 64), excerpt(safe_dump(*it), 64, false)));
        }
        r.take(rename(it.key()), v);
    }
    if (!alert && r.event == "alert")
        throw bad("event kind \"alert\" is a trainer's alert: write {\"step\": N, \"alert\": TITLE, \"text\": ..., "
                  "\"level\": ...}");
}

}  // namespace hlat::telemetry
