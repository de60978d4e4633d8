// JSON replies of the API: values, errors, and NaN/Inf as JSON can carry them.
#pragma once

#include "telemetry/untrusted_text.h"
#include "web/api.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace hlat::web {

// NaN and Inf are not JSON: NaN becomes null, infinities their sign as a string.
inline nlohmann::json json_number(double v) {
    if (std::isnan(v)) return nullptr;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

// Never throws: text that is not valid UTF-8 (a name stored before names were
// checked) goes out with U+FFFD in its place.
inline Response reply(int status, const nlohmann::json& body) {
    return {status, "application/json", telemetry::safe_dump(body)};
}
inline Response error(int status, const std::string& message) { return reply(status, {{"error", message}}); }

// A request the client got wrong: 400 with the message.
struct BadRequest : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The integer query parameter `name`, `fallback` when absent; BadRequest
// unless it is a whole integer in [lo, hi].
inline int64_t int_param(const Request& r, const std::string& name, int64_t fallback, int64_t lo, int64_t hi) {
    auto it = r.query.find(name);
    if (it == r.query.end()) return fallback;
    int64_t v;
    const std::string& s = it->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
        throw BadRequest(fmt::format("parameter {}={} must be an integer in [{}, {}]", name, telemetry::excerpt(s, 40), lo, hi));
    return v;
}

// Everything text in a request must be UTF-8 before anything looks at it:
// nothing invalid is stored, and no message echoes raw bytes.
inline void check_request_text(const Request& r) {
    if (!telemetry::valid_utf8(r.path)) throw BadRequest("the path is not valid UTF-8: " + telemetry::excerpt(r.path, 100));
    for (const auto& [name, value] : r.query)
        if (!telemetry::valid_utf8(name) || !telemetry::valid_utf8(value))
            throw BadRequest(fmt::format("parameter {} is not valid UTF-8", telemetry::excerpt(name, 40)));
}

}  // namespace hlat::web
