#include "telemetry/untrusted_text.h"

#include <fmt/format.h>

#include <stdexcept>

namespace hlat::telemetry {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not
// one (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t utf8_sequence(std::string_view s, size_t i) {
    const auto byte = [&](size_t k) { return (unsigned char)s[k]; };
    const unsigned char c = byte(i);
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC) n = 3;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c >= 0xEE && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return n;
}

}  // namespace

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_sequence(s, i);
        if (!n) return false;
        i += n;
    }
    return true;
}

std::string excerpt(std::string_view s, size_t max_bytes, bool quoted) {
    std::string out = quoted ? "\"" : "";
    size_t i = 0;
    while (i < s.size() && i < max_bytes) {
        const unsigned char c = (unsigned char)s[i];
        const size_t n = utf8_sequence(s, i);
        if (n > 1 && i + n <= max_bytes) {
            out.append(s.substr(i, n));
            i += n;
            continue;
        }
        if (quoted && (c == '"' || c == '\\')) out += '\\', out += (char)c;
        else if (n == 1 && c >= 0x20 && c != 0x7F) out += (char)c;
        else out += fmt::format("\\x{:02x}", c);
        i++;
    }
    if (quoted) out += '"';
    if (i < s.size()) out += fmt::format("... ({} bytes)", s.size());
    return out;
}

int json_depth(std::string_view text, int limit) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size() && deepest <= limit; i++) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return deepest;
}

void check_json_depth(std::string_view text, const std::string& what) {
    if (json_depth(text) > kMaxJsonDepth)
        throw std::invalid_argument(fmt::format("{} nests arrays or objects more than {} deep", what, kMaxJsonDepth));
}

size_t utf8_characters(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // every byte but a continuation starts one
    return n;
}

bool has_control(std::string_view s, bool allow_line_breaks) {
    for (unsigned char c : s) {
        if (allow_line_breaks && (c == '\n' || c == '\r' || c == '\t')) continue;
        if (c < 0x20 || c == 0x7F) return true;
    }
    return false;
}

void check_name(std::string_view name, const char* what) {
    if (name.empty() || name.size() > kMaxNameBytes || has_control(name, false) || !valid_utf8(name))
        throw std::invalid_argument(fmt::format("{} {}: must be 1 to {} bytes of UTF-8 without control characters",
                                                what, excerpt(name, 64), kMaxNameBytes));
}

std::string safe_dump(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace hlat::telemetry
