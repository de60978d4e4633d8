// JSON replies of the API: values, errors, and NaN/Inf as JSON can carry them.
#pragma once

#include "web/api.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

namespace hlat::web {

// NaN and Inf are not JSON: NaN becomes null, infinities their sign as a string.
inline nlohmann::json json_number(double v) {
    if (std::isnan(v)) return nullptr;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

inline Response reply(int status, const nlohmann::json& body) { return {status, "application/json", body.dump()}; }
inline Response error(int status, const std::string& message) { return reply(status, {{"error", message}}); }

// A request the client got wrong: 400 with the message.
struct BadRequest : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace hlat::web
