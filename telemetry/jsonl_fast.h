// The common JSON line read straight into its values, without a DOM.
//
// Nearly every line a trainer sends is a flat object of numbers, and the
// model's internals add objects of numbers (a statistic over layers, heads or
// tensors, named per element). nlohmann's DOM spends most of ingest building
// maps and strings for those, and even its SAX reader lexes a byte at a time;
// simdjson (Debian's libsimdjson-dev) parses a line into a flat tape with
// SIMD (ingest into hlat serve went from 1.0M to 2.1M values/s, Zen 3;
// docs/internals.md). FastJsonlReader takes exactly that shape and declines everything
// else (strings, booleans, lists, deeper nesting, a repeated name, an empty
// object as a value, invalid JSON) but a "batch" of strings (a step's batch
// ids, telemetry/ingest.h), which LineParser then reads the full way,
// with its own error messages: the two agree on every line this one accepts
// (tested line by line), values handed over in the DOM's order.
#pragma once

#include "telemetry/records.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace simdjson::dom {
class parser;
}

namespace hlat::telemetry {

// Names compared with their digit runs as numbers: "layers.2" before "layers.10".
bool natural_less(const std::string& a, const std::string& b);

struct FastLine {
    std::vector<std::pair<std::string, double>> scalars;  // nulls (missing values) left out
    std::vector<VectorPoint> vectors;                     // elements in natural order of their names
    std::vector<std::string> keys;                        // every name of the line's object, nulls' too
    bool has_batch = false;                               // "batch": a string or a list of strings
    std::vector<std::string> batch;                       // its ids, unchecked (LineParser checks them)
};

class FastJsonlReader {
  public:
    FastJsonlReader();
    ~FastJsonlReader();
    // A copy remembers the same shapes and has a parser of its own.
    FastJsonlReader(const FastJsonlReader& other);
    FastJsonlReader& operator=(const FastJsonlReader& other);
    FastJsonlReader(FastJsonlReader&&) noexcept;
    FastJsonlReader& operator=(FastJsonlReader&&) noexcept;
    // True with `out` filled when the line has the common shape; false (and
    // `out` to be ignored) otherwise.
    bool read(std::string_view line, FastLine& out);

    // One key's element names as the last line had them, and where each goes.
    struct Shape {
        std::vector<std::string> sent;  // in the line's order
        std::vector<uint32_t> slot;     // each one's place in natural order
        std::shared_ptr<const std::vector<std::string>> labels;  // natural order
    };

  private:
    std::unique_ptr<simdjson::dom::parser> parser_;  // its buffers kept from line to line; a copy makes its own
    std::map<std::string, Shape> shapes_;            // per key
};

}  // namespace hlat::telemetry
