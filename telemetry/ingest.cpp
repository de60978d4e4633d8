#include "telemetry/ingest.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>

namespace hlat::telemetry {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

// "nan", "inf", "-inf" (any case), or a number in full.
bool parse_number(std::string_view s, double* out) {
    s = trim(s);
    std::string lower;
    for (char c : s) lower += (char)std::tolower((unsigned char)c);
    if (lower == "nan") return *out = NAN, true;
    if (lower == "inf" || lower == "+inf" || lower == "infinity") return *out = INFINITY, true;
    if (lower == "-inf" || lower == "-infinity") return *out = -INFINITY, true;
    if (s.empty()) return false;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
}

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

}  // namespace

std::vector<std::string> parse_csv_header(const std::string& file, std::string_view line) {
    std::vector<std::string> names;
    bool has_step = false;
    for (std::string_view f : split_csv(line)) {
        if (f.empty()) throw IngestError(fmt::format("{}:1: empty column name in the CSV header", file));
        names.emplace_back(f);
        has_step = has_step || f == "step";
    }
    if (!has_step) throw IngestError(fmt::format("{}:1: the CSV header has no \"step\" column", file));
    return names;
}

std::vector<MetricPoint> parse_records(const std::string& file, std::string_view text, long first_line, bool csv,
                                       const std::vector<std::string>& csv_header, int64_t* last_step,
                                       double default_time) {
    std::vector<MetricPoint> out;
    int64_t previous = *last_step;
    long line_number = first_line - 1;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        line_number++;
        if (trim(line).empty()) continue;
        auto bad = [&](const std::string& why) { return IngestError(fmt::format("{}:{}: {}", file, line_number, why)); };

        std::vector<std::pair<std::string, double>> fields;
        bool has_step = false, has_time = false;
        double step_value = 0.0, time = default_time;
        auto take = [&](const std::string& name, double v) {
            if (name == "step") {
                has_step = true;
                step_value = v;
            } else if (name == "time") {
                has_time = true;
                time = v;
            } else {
                fields.push_back({name, v});
            }
        };
        if (csv) {
            std::vector<std::string_view> cells = split_csv(line);
            if (cells.size() != csv_header.size())
                throw bad(fmt::format("{} cells for {} columns", cells.size(), csv_header.size()));
            for (size_t i = 0; i < cells.size(); i++) {
                if (cells[i].empty() && csv_header[i] != "step") continue;  // a missing value
                double v;
                if (!parse_number(cells[i], &v))
                    throw bad(fmt::format("column \"{}\" is \"{}\", not a number", csv_header[i], cells[i]));
                take(csv_header[i], v);
            }
        } else {
            nlohmann::json j;
            try {
                j = nlohmann::json::parse(line);
            } catch (const nlohmann::json::exception& e) {
                throw bad(fmt::format("not valid JSON ({})", e.what()));
            }
            if (!j.is_object()) throw bad("not a JSON object");
            for (auto it = j.begin(); it != j.end(); ++it) {
                double v;
                if (it->is_number()) {
                    v = it->get<double>();
                } else if (!(it->is_string() && parse_number(it->get<std::string>(), &v))) {
                    throw bad(fmt::format("field \"{}\" is {}, not a number", it.key(), it->dump()));
                }
                take(it.key(), v);
            }
        }
        if (!has_step) throw bad("no \"step\" field");
        if (!(step_value >= 0) || step_value != std::floor(step_value) || step_value > 9e15)
            throw bad(fmt::format("step {} is not a non-negative integer", step_value));
        int64_t step = (int64_t)step_value;
        if (step < previous) throw bad(fmt::format("step {} goes backwards (after step {})", step, previous));
        if (has_time && !std::isfinite(time)) throw bad("time is not a finite number");
        previous = step;
        for (auto& [name, v] : fields) out.push_back({name, step, v, time});
    }
    *last_step = previous;
    return out;
}

}  // namespace hlat::telemetry
