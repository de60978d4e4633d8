// The line parser (ingest.h): lines into records, whatever the format,
// with the rules every format shares: steps, times, staleness, a bad line
// rejected whole. The formats are ingest_jsonl.cpp and ingest_text.cpp.
#include "telemetry/ingest.h"

#include "telemetry/ingest_record.h"

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

bool valid_step(double step) { return step >= 0 && step <= 9e15 && step == std::floor(step); }


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

// A step's batch ids, whatever the format brought them in.
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

}  // namespace hlat::telemetry
