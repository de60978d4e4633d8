// What the line parser's files share (internal to telemetry/): one line's
// record as it is taken, and a --pattern compiled to a regex.
#pragma once

#include "telemetry/ingest.h"

#include <re2/re2.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hlat::telemetry {

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

// A CSV line's cells, trimmed (ingest_text.cpp).
std::vector<std::string_view> split_csv(std::string_view line);

// "step: {step} loss: {loss}" -> a regex with a number group per {name} (ingest_text.cpp).
std::shared_ptr<const re2::RE2> compile_pattern(const std::string& pattern, std::vector<std::string>* names);

}  // namespace hlat::telemetry
