// Reading numbers and names out of log text: what every line format shares.
#pragma once

#include <string>
#include <string_view>

namespace hlat::telemetry {

// Without leading and trailing spaces, tabs and carriage returns.
std::string_view trim(std::string_view s);
std::string lowercase(std::string_view s);
// "nan", "inf", "-inf", "infinity" (any case), or a number in full;
// thousands separators ("1,234") are allowed where `commas` says so.
bool parse_number(std::string_view s, double* out, bool commas = false);
// Without ANSI colour codes (ESC [ ... m), which console loggers such as
// torchtitan's put between a label and its number.
std::string strip_ansi(std::string_view s);

}  // namespace hlat::telemetry
