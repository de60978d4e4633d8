#include "telemetry/ingest.h"

#include "telemetry/key_aliases.h"

#include "telemetry/console_formats.h"
#include "telemetry/log_text.h"
#include "telemetry/untrusted_text.h"

#include <fmt/format.h>
#include <re2/re2.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

namespace hlat::telemetry {
namespace {

std::vector<std::string_view> split_csv(std::string_view line) {
    std::vector<std::string_view> out;
    size_t start = 0;
    for (;;) {
        size_t comma = line.find(',', start);
        out.push_back(trim(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return out;
}

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

const char* kNumberRegex = R"(([-+]?(?:[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|nan|NaN|-?inf|-?Infinity)))";

// "step: {step} loss: {loss}" -> a regex with a number group per {name}.
std::shared_ptr<const re2::RE2> compile_pattern(const std::string& pattern, std::vector<std::string>* names) {
    std::string re;
    for (size_t i = 0; i < pattern.size();) {
        char c = pattern[i];
        if (c == '{') {
            size_t close = pattern.find('}', i);
            if (close == std::string::npos) throw IngestError(fmt::format("pattern \"{}\": a {{ is never closed", pattern));
            std::string name = pattern.substr(i + 1, close - i - 1);
            if (name.empty()) throw IngestError(fmt::format("pattern \"{}\": {{}} needs a metric name", pattern));
            names->push_back(name);
            re += kNumberRegex;
            i = close + 1;
        } else if (std::isspace((unsigned char)c)) {
            while (i < pattern.size() && std::isspace((unsigned char)pattern[i])) i++;
            re += R"(\s*)";
        } else {
            if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) re += '\\';
            re += c;
            i++;
        }
    }
    if (std::find(names->begin(), names->end(), "step") == names->end())
        throw IngestError(fmt::format("pattern \"{}\" has no {{step}}", pattern));
    auto compiled = std::make_shared<const re2::RE2>(re, re2::RE2::Quiet);
    if (!compiled->ok()) throw IngestError(fmt::format("pattern \"{}\": {}", pattern, compiled->error()));
    return compiled;
}

}  // namespace

bool valid_step(double step) { return step >= 0 && step <= 9e15 && step == std::floor(step); }

LogFormat format_from_name(const std::string& name) {
    if (name == "jsonl") return LogFormat::Jsonl;
    if (name == "csv") return LogFormat::Csv;
    if (name == "llmc") return LogFormat::Llmc;
    if (name == "pattern") return LogFormat::Pattern;
    if (name == "tensorboard") return LogFormat::TensorBoard;
    if (name == "steploss") return LogFormat::StepLoss;
    if (name == "torchtitan") return LogFormat::Torchtitan;
    if (name == "megatron") return LogFormat::Megatron;
    throw IngestError(fmt::format("unknown log format \"{}\" (jsonl, csv, llmc, tensorboard, steploss, torchtitan, "
                                  "megatron or pattern)",
                                  name));
}

const char* format_name(LogFormat f) {
    switch (f) {
        case LogFormat::Jsonl: return "jsonl";
        case LogFormat::Csv: return "csv";
        case LogFormat::Llmc: return "llmc";
        case LogFormat::Pattern: return "pattern";
        case LogFormat::TensorBoard: return "tensorboard";
        case LogFormat::StepLoss: return "steploss";
        case LogFormat::Torchtitan: return "torchtitan";
        case LogFormat::Megatron: return "megatron";
    }
    return "?";
}

LogFormat detect_format(const std::string& path, std::string_view head) {
    std::string_view first = head.substr(0, head.find('\n'));
    std::string_view line = trim(first);
    if (path.find("tfevents") != std::string::npos) return LogFormat::TensorBoard;
    if (line.rfind("s:", 0) == 0 && line.size() > 2 && std::isdigit((unsigned char)line[2])) return LogFormat::Llmc;
    if (line.rfind("{", 0) == 0) return LogFormat::Jsonl;
    if (!line.empty() && line.find(',') != std::string_view::npos) {
        for (std::string_view cell : split_csv(line))
            if (cell == "step") return LogFormat::Csv;
    }
    if (std::string console = console_format_of(head); !console.empty()) return format_from_name(console);
    auto ends_with = [&](const char* ext) {
        std::string_view p(path), e(ext);
        return p.size() >= e.size() && p.substr(p.size() - e.size()) == e;
    };
    if (ends_with(".jsonl") || ends_with(".json")) return LogFormat::Jsonl;
    if (ends_with(".csv")) return LogFormat::Csv;
    if (head.empty())
        throw IngestError(fmt::format("{} is empty: name its format with --format (jsonl, csv, llmc, steploss, "
                                      "torchtitan, megatron, pattern)",
                                      path));
    throw IngestError(fmt::format("{}: cannot tell its format from its first MB (first line {}); name it with --format "
                                  "(jsonl, csv, llmc, tensorboard, steploss, torchtitan, megatron, or pattern with --pattern)",
                                  path, excerpt(line, 80)));
}

KeyMap parse_key_map(const std::string& text) {
    KeyMap out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        std::string pair = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!trim(pair).empty()) {
            size_t eq = pair.find('=');
            std::string from = eq == std::string::npos ? "" : std::string(trim(std::string_view(pair).substr(0, eq)));
            std::string to = eq == std::string::npos ? "" : std::string(trim(std::string_view(pair).substr(eq + 1)));
            if (from.empty() || to.empty())
                throw IngestError(fmt::format("--map \"{}\": each entry is LOG_NAME=HLAT_NAME, e.g. train_loss=loss", pair));
            out[from] = to;
        }
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

BatchRecord batch_record(const BatchIds& batch) {
    return {batch.step, nlohmann::json{{"ids", batch.ids}}.dump(), batch.wall_time};
}

struct LineParser::Record {
    bool has_step = false, has_time = false, matched = true, has_batch = false;
    double step = 0.0, time = 0.0;
    std::vector<std::pair<std::string, double>> fields;
    std::vector<VectorPoint> vectors;  // step and time set when the record is taken
    std::string event, detail;
    std::vector<std::string> batch;  // the step's batch ids, checked in parse_record
    void take(const std::string& name, double v) {
        if (name == "step") has_step = true, step = v;
        else if (name == "time") has_time = true, time = v;
        else fields.push_back({name, v});
    }
};

LineParser::LineParser(std::string file, LogFormat format, const std::string& pattern, KeyMap rename)
    : file_(std::move(file)), format_(format), rename_(std::move(rename)) {
    if (format == LogFormat::TensorBoard)
        throw IngestError(fmt::format("{}: TensorBoard event files are binary, not lines", file_));
    if (format == LogFormat::Pattern) {
        if (pattern.empty()) throw IngestError("--format pattern needs --pattern, e.g. \"step: {step} loss: {loss}\"");
        pattern_ = compile_pattern(pattern, &pattern_names_);
    }
}

std::string LineParser::rename(std::string_view name) const {
    auto it = rename_.find(std::string(name));
    if (it != rename_.end()) return it->second;
    if (format_ == LogFormat::Llmc)
        if (std::optional<std::string> key = alias_of(std::string(name), "llmc")) return *key;
    return std::string(name);
}

ParsedBatch LineParser::parse(std::string_view text, double default_time) {
    const std::vector<std::string> header = csv_header_;
    const int64_t last = last_step_;
    const long next = next_line_;
    const std::set<std::string> keys = keys_at_last_step_;
    const bool batch = batch_at_last_step_;
    const double origin = time_origin_;
    const bool noted = time_noted_;
    std::optional<BadLine> bad;
    ParsedBatch out = parse_until_bad(text, default_time, &bad);
    if (bad) {
        csv_header_ = header, last_step_ = last, next_line_ = next, keys_at_last_step_ = keys, time_origin_ = origin;
        batch_at_last_step_ = batch, time_noted_ = noted;
        throw IngestError(bad->message);
    }
    return out;
}

void append_capped(std::string& pending, std::string_view bytes, bool& cutting) {
    if (cutting) {
        const size_t nl = bytes.find('\n');
        if (nl == std::string_view::npos) return;
        bytes.remove_prefix(nl);  // the newline ends the line cut short
        cutting = false;
    }
    pending.append(bytes);
    const size_t last_nl = pending.rfind('\n');
    const size_t line = last_nl == std::string::npos ? 0 : last_nl + 1;
    if (pending.size() - line > kMaxLineBytes + 1) {
        pending.resize(line + kMaxLineBytes + 1);
        cutting = true;
    }
}

ParsedBatch LineParser::parse_until_bad(std::string_view text, double default_time, std::optional<BadLine>* bad) {
    ParsedBatch out;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        const long number = next_line_++;
        try {
            parse_record(line, number, default_time, csv_header_, out);
        } catch (const IngestError& e) {
            next_line_--;  // the caller decides: skip_lines(1) passes over it
            *bad = BadLine{number, e.what(), pos};
            return out;
        }
    }
    return out;
}

// One line into `out` (a header row into `header`); throws IngestError
// ("FILE:LINE: why") having added nothing when the line is bad.
void LineParser::parse_record(std::string_view line, long number, double default_time,
                              std::vector<std::string>& header, ParsedBatch& out) {
    if (trim(line).empty()) return;
    auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file_, number, why)); };
    if (line.size() > kMaxLineBytes)
        throw bad(fmt::format("the line is over {} MB, the most a record may take: {}", kMaxLineBytes >> 20,
                              excerpt(line, 100)));
    // A parser reading up to a NUL would drop what follows it without a word.
    if (size_t nul = line.find('\0'); nul != std::string_view::npos)
        throw bad(fmt::format("a NUL byte at column {}: {}", nul + 1, excerpt(line, 100)));
    if (format_ == LogFormat::Csv && header.empty()) {
        std::vector<std::string> names;
        for (std::string_view f : split_csv(line)) {
            if (f.empty()) throw bad("empty column name in the CSV header");
            names.emplace_back(f);
        }
        if (std::find(names.begin(), names.end(), "step") == names.end()) throw bad("the CSV header has no \"step\" column");
        header = std::move(names);
        return;
    }
    Record r;
    r.time = default_time;
    parse_line(line, number, header, r);
    if (!r.matched) {
        out.skipped++;
        return;
    }
    if (!r.has_step) throw bad("no \"step\" field");
    if (!valid_step(r.step))
        throw bad(fmt::format("step {} is not a non-negative integer", r.step));
    if (r.has_time && !std::isfinite(r.time)) throw bad("time is not a finite number");
    if (r.has_time) r.time = bounded_time(r.time, number, default_time, out);
    for (const auto& [name, v] : r.fields) {
        try {
            check_name(name, "metric key");
        } catch (const std::invalid_argument& e) {
            throw bad(e.what());
        }
    }
    for (const VectorPoint& v : r.vectors) {
        try {
            check_name(v.key, "metric key");
        } catch (const std::invalid_argument& e) {
            throw bad(e.what());
        }
    }
    if (r.has_batch) check_batch_ids(r.batch, bad);
    const int64_t step = (int64_t)r.step;
    if (step > last_step_) keys_at_last_step_.clear(), batch_at_last_step_ = false;
    // A key the last step already had is a repeat too: its first value stays (its batch ids too).
    std::erase_if(r.fields, [&](const auto& f) { return step == last_step_ && keys_at_last_step_.count(f.first); });
    const bool new_batch = r.has_batch && !(step == last_step_ && batch_at_last_step_);
    if (step < last_step_ || (r.fields.empty() && r.event.empty() && !new_batch && step == last_step_)) {
        out.stale++;
        return;
    }
    last_step_ = step;
    for (const auto& f : r.fields) keys_at_last_step_.insert(f.first);
    out.records++;
    if (new_batch) {
        batch_at_last_step_ = true;
        out.batches.push_back({step, std::move(r.batch), r.time});
    }
    if (!r.event.empty()) out.events.push_back({r.event, step, r.time, r.detail});
    for (auto& [name, v] : r.fields) out.points.push_back({name, step, v, r.time});
    for (VectorPoint& v : r.vectors) {
        v.step = step, v.wall_time = r.time;
        out.vectors.push_back(std::move(v));
    }
}

// A record's "time" as seconds since the epoch (see ingest.h): 1e8 s is
// 1973 and 1e11 s the year 5138, so each unit is told by its size (ms, us
// and ns since the epoch are above 1e11, 1e14 and 1e17 until the year 5138).
double LineParser::wall_time_of(double time, double default_time) {
    if (time > 1e17) return time / 1e9;     // nanoseconds (Python's time.time_ns())
    if (time > 1e14) return time / 1e6;     // microseconds
    if (time > 1e11) return time / 1000.0;  // milliseconds (JavaScript's Date.now(), many loggers)
    if (time >= 1e8) return time;
    relative_time_ = true;
    if (std::isnan(time_origin_)) time_origin_ = default_time - time;
    return time_origin_ + time;
}

bool valid_time(double t, double now) { return t >= 1e8 && t <= now + 86400.0; }

// A record's time as wall time, within valid_time's bounds by this
// machine's clock (default_time may be any time the caller chose). One out
// of them is dated default_time, when the line is read, not refused: the line's values are
// real measurements and only their date is wrong, and refusing it would lose
// them (over HTTP, where a batch is all or nothing, every batch of a client
// whose clock runs ahead, for as long as it does). The first such line of
// the parser gets a message naming it, for the caller to warn with once.
double LineParser::bounded_time(double time, long number, double default_time, ParsedBatch& out) {
    const double t = wall_time_of(time, default_time);
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (valid_time(t, now)) return t;
    out.clamped_times++;
    if (!time_noted_) {
        time_noted_ = true;
        out.time_note = fmt::format(
            "{}:{}: \"time\" {} reads as {} s since the epoch, {:.3g} days {} this machine's clock (times are kept "
            "from 1e8 s to now + 1 day): its record is dated when it was read instead, as is every later one out of "
            "bounds (a clock that is off, or a time in another unit?)",
            file_, number, time, t, std::abs(t - now) / 86400.0, t > now ? "ahead of" : "behind");
    }
    return default_time;
}

void LineParser::parse_line(std::string_view line, long number, const std::vector<std::string>& header, Record& r) {
    switch (format_) {
        case LogFormat::Csv: return parse_csv(line, number, header, r);
        case LogFormat::Jsonl: return parse_jsonl(line, number, r);
        case LogFormat::Llmc: return parse_llmc(line, number, r);
        case LogFormat::Pattern: return parse_pattern(line, number, r);
        case LogFormat::StepLoss:
        case LogFormat::Torchtitan:
        case LogFormat::Megatron: return parse_console(line, number, r);
        case LogFormat::TensorBoard: break;
    }
}

void LineParser::parse_csv(std::string_view line, long number, const std::vector<std::string>& header, Record& r) {
    auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file_, number, why)); };
    std::vector<std::string_view> cells = split_csv(line);
    if (cells.size() != header.size())
        throw bad(fmt::format("{} cells for {} columns: {}", cells.size(), header.size(), excerpt(line)));
    for (size_t i = 0; i < cells.size(); i++) {
        std::string name = rename(header[i]);
        if (cells[i].empty() && name != "step") continue;  // a missing value
        double v;
        if (!parse_number(cells[i], &v))
            throw bad(fmt::format("column {} is {}, not a number", excerpt(header[i], 64), excerpt(cells[i], 64)));
        r.take(name, v);
    }
    return;
}

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

template <typename Bad>
void LineParser::check_batch_ids(const std::vector<std::string>& ids, const Bad& bad) {
    if (ids.size() > kMaxBatchIds)
        throw bad(fmt::format("field \"batch\" holds {} batch ids; a step takes at most {}", ids.size(), kMaxBatchIds));
    for (size_t i = 0; i < ids.size(); i++) {
        const std::string& id = ids[i];
        const std::string which = ids.size() == 1 ? "the batch id" : fmt::format("batch id {}", i);
        if (id.empty()) throw bad(fmt::format("field \"batch\": {} is empty", which));
        if (id.size() > kMaxBatchIdBytes)
            throw bad(fmt::format("field \"batch\": {} is {} bytes, the most is {}: {}", which, id.size(),
                                  kMaxBatchIdBytes, excerpt(id, 64)));
        if (!valid_utf8(id) || has_control(id, false))
            throw bad(fmt::format("field \"batch\": {} holds a control character or bytes that are not UTF-8: {}",
                                  which, excerpt(id, 64)));
    }
}

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

void LineParser::parse_llmc(std::string_view line, long number, Record& r) {
    auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file_, number, why)); };
    std::string_view s = trim(line);
    // modded-nanogpt, llm.c's descendant, writes "step:12/3200 train_loss:3.28 train_time:1234ms".
    const bool modded = is_modded_nanogpt_line(s);
    if (s.rfind("s:", 0) != 0 && !modded) {
        r.matched = false;  // llm.c-style logs may carry other text (modded-nanogpt puts its code first)
        return;
    }
    size_t pos = 0;
    while (pos < s.size()) {
        size_t end = s.find_first_of(" \t", pos);
        std::string_view token = s.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
        pos = end == std::string_view::npos ? s.size() : s.find_first_not_of(" \t", end);
        if (pos == std::string_view::npos) pos = s.size();
        size_t colon = token.find(':');
        if (colon == std::string_view::npos || colon == 0) throw bad(fmt::format("{} is not KEY:VALUE", excerpt(token, 64)));
        std::string_view key = token.substr(0, colon), value = token.substr(colon + 1);
        if (modded && key == "step") value = value.substr(0, value.find('/'));  // "12/3200": step 12 of 3200
        // A unit after the number (120ms, 3.5%) joins the name: train_time_ms.
        double v;
        std::string unit;
        if (!number_and_unit(value, &v, &unit))
            throw bad(fmt::format("{} is not a number in {}", excerpt(value, 64), excerpt(token, 64)));
        std::string name(key);
        if (!unit.empty()) name += "_" + unit;
        r.take(key == "s" || (modded && key == "step") ? "step" : rename(name), v);
    }
    return;
}

// A line of a trainer's console or a loss file: not a record (the banner,
// the config dump) is skipped and counted, as with a pattern.
// A "<step> <loss>" file has no other lines: one is a bad line, as in JSONL.
void LineParser::parse_console(std::string_view line, long number, Record& r) {
    Fields fields;
    const bool record = format_ == LogFormat::StepLoss     ? parse_steploss_line(line, fields)
                        : format_ == LogFormat::Torchtitan ? parse_torchtitan_line(line, fields)
                                                           : parse_megatron_line(line, fields);
    if (!record && format_ == LogFormat::StepLoss)
        throw IngestError(fmt::format("{}:{}: not \"<step> <loss>\": {}", file_, number, excerpt(line, 100)));
    r.matched = record;
    for (auto& [name, v] : fields) r.take(name == "step" ? name : rename(name), v);
}

void LineParser::parse_pattern(std::string_view line, long number, Record& r) {
    auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file_, number, why)); };
    std::string plain = strip_ansi(line);
    const size_t n = pattern_names_.size();
    std::vector<std::string> captured(n);
    std::vector<re2::RE2::Arg> args;
    args.reserve(n);
    for (std::string& c : captured) args.emplace_back(&c);
    std::vector<const re2::RE2::Arg*> arg_ptrs;
    for (const re2::RE2::Arg& a : args) arg_ptrs.push_back(&a);
    if (!re2::RE2::PartialMatchN(plain, *pattern_, arg_ptrs.data(), (int)n)) {
        r.matched = false;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (pattern_names_[i] == "_") continue;  // {_}: a number to match and leave
        double v;
        if (!parse_number(captured[i], &v, true))
            throw bad(fmt::format("{{{}}} matched {}, not a number", pattern_names_[i], excerpt(captured[i], 64)));
        r.take(rename(pattern_names_[i]), v);
    }
    return;
}

}  // namespace hlat::telemetry
