// What every detector's file needs to raise an alert and keep its state as
// JSON. Internal to detectors/.
#pragma once

#include "telemetry/records.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <deque>
#include <string>

namespace hlat::detectors {

inline telemetry::Alert make_alert(const char* kind, const char* severity, int64_t step, std::string message,
                                   const nlohmann::json& data) {
    // A trainer's title or text cut to size may end mid-character: replaced, never thrown.
    return {kind, severity, step, std::move(message),
            data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 0.0};
}

// JSON has no NaN: a detector's "nothing yet" travels as null.
inline nlohmann::json number(double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); }
inline double number(const nlohmann::json& j) { return j.is_null() ? NAN : j.get<double>(); }

inline nlohmann::json numbers(const std::deque<double>& xs) {
    nlohmann::json out = nlohmann::json::array();
    for (double x : xs) out.push_back(number(x));
    return out;
}

// The newest `keep` values: a window restored under a smaller configured size
// is cut to it.
inline std::deque<double> numbers(const nlohmann::json& j, size_t keep) {
    std::deque<double> out;
    for (const nlohmann::json& x : j) out.push_back(number(x));
    while (out.size() > keep) out.pop_front();
    return out;
}

}  // namespace hlat::detectors
