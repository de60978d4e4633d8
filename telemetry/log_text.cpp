#include "telemetry/log_text.h"

#include <charconv>
#include <cctype>
#include <cmath>

namespace hlat::telemetry {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

std::string lowercase(std::string_view s) {
    std::string out;
    for (char c : s) out += (char)std::tolower((unsigned char)c);
    return out;
}

bool parse_number(std::string_view s, double* out, bool commas) {
    s = trim(s);
    std::string lower = lowercase(s);
    if (lower == "nan" || lower == "-nan") return *out = NAN, true;
    if (lower == "inf" || lower == "+inf" || lower == "infinity") return *out = INFINITY, true;
    if (lower == "-inf" || lower == "-infinity") return *out = -INFINITY, true;
    std::string plain;
    if (commas) {
        for (char c : s)
            if (c != ',') plain += c;
        s = plain;
    }
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    if (s.empty()) return false;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return ec == std::errc() && end == s.data() + s.size();
}

bool number_and_unit(std::string_view token, double* v, std::string* unit, bool commas) {
    unit->clear();
    if (parse_number(token, v, commas)) return true;
    const std::string lower = lowercase(token);
    size_t end = token.size();
    if (lower.rfind("nan", 0) == 0 || lower.rfind("inf", 0) == 0) end = 3;
    else if (lower.rfind("-inf", 0) == 0) end = 4;
    else
        while (end > 0 && (std::isalpha((unsigned char)token[end - 1]) || token[end - 1] == '%')) end--;
    if (end == token.size() || !parse_number(token.substr(0, end), v, commas)) return false;
    const std::string_view u = token.substr(end);
    *unit = u == "%" ? "pct" : std::string(u);
    return true;
}

std::string strip_ansi(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            size_t j = i + 2;
            while (j < s.size() && (std::isdigit((unsigned char)s[j]) || s[j] == ';')) j++;
            if (j < s.size() && s[j] == 'm') {
                i = j;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

std::string precision_name(const std::string& p) {
    if (p == "float32" || p == "32" || p == "32-true" || p == "fp32" || p == "torch.float32") return "fp32";
    if (p == "bfloat16" || p == "bf16-true" || p == "torch.bfloat16") return "bf16";
    if (p == "bf16-mixed" || p == "amp_bf16" || p == "amp") return "mixed";
    return p;
}

}  // namespace hlat::telemetry
