// The line parser's text formats: CSV, llm.c's log, a trainer's console
// (torchtitan, Megatron, a "<step> <loss>" file) and a --pattern.
#include "telemetry/ingest_record.h"

#include "telemetry/console_formats.h"
#include "telemetry/key_aliases.h"
#include "telemetry/log_text.h"
#include "telemetry/untrusted_text.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace hlat::telemetry {
namespace {

const char* kNumberRegex = R"(([-+]?(?:[0-9][0-9,]*\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|nan|NaN|-?inf|-?Infinity)))";

}  // namespace

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
