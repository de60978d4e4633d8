// Records from other trainers: JSONL (one object per line) or CSV (a header
// row, then one row per record). Each record has an integer `step` >= 0 and any
// number of numeric fields, each becoming a metric key; `time` (seconds since
// the epoch), when present, is the wall time. Values may be numbers or the
// strings "nan", "inf", "-inf" (JSON has no literals for them). Steps must not
// go backwards.
#pragma once

#include "telemetry/records.h"

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hlat::telemetry {

struct IngestError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Parses a chunk of complete lines. first_line numbers them in messages
// (FILE:LINE); *last_step carries the step order across chunks (start at -1).
// CSV needs the header: pass it (empty for JSONL). Throws IngestError on the
// first bad line, having produced nothing: a batch is all or nothing.
std::vector<MetricPoint> parse_records(const std::string& file, std::string_view text, long first_line,
                                       bool csv, const std::vector<std::string>& csv_header, int64_t* last_step,
                                       double default_time);

// Splits a CSV header line into field names; throws IngestError without `step`.
std::vector<std::string> parse_csv_header(const std::string& file, std::string_view line);

}  // namespace hlat::telemetry
