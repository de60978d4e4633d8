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
// A number with a unit after it, as llm.c's and torchtitan's logs print them:
// "120ms" -> 120 and "ms", "3.5%" -> 3.5 and "pct", "nanms" -> NaN and "ms",
// "2.5" -> 2.5 and ""; "1,040" -> 1040 where `commas` says so. False when no
// number leads.
bool number_and_unit(std::string_view token, double* v, std::string* unit, bool commas = false);
// Without ANSI colour codes (ESC [ ... m), which console loggers such as
// torchtitan's put between a label and its number.
std::string strip_ansi(std::string_view s);
// A precision as hlat names it (fp32, bf16, bf16_sr, bf16_kahan, mixed):
// PyTorch's and Lightning's names read as hlat's ("float32" -> fp32,
// "bfloat16" -> bf16, "bf16-mixed" -> mixed); any other name as written.
std::string precision_name(const std::string& name);

}  // namespace hlat::telemetry
