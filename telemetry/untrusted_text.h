// Text that comes from outside (a log line, a request, a config file): checks
// made before it is parsed or stored, and how it is quoted back in messages.
// Every message that names bad input uses excerpt(): a bounded, escaped
// quote, never the raw bytes or a whole document.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace hlat::telemetry {

// The deepest nesting of JSON's [ and { accepted anywhere (configs, ingest
// lines and bodies): real documents stay under 10; a hostile one can be
// 100,000 deep and overflow a recursive parser or printer.
constexpr int kMaxJsonDepth = 64;

bool valid_utf8(std::string_view s);

// At most `max_bytes` of s between quotes (unless `quoted` is false), with
// quotes and backslashes escaped, control bytes and bytes that are not valid
// UTF-8 written as \xNN, and "... (N bytes)" when cut: safe to print, log
// and store.
std::string excerpt(std::string_view s, size_t max_bytes = 200, bool quoted = true);

// The nesting depth of the JSON text's arrays and objects, counted without
// parsing (strings skipped), stopping once it passes `limit`.
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

// Throws std::invalid_argument naming `what` when the text nests deeper than
// kMaxJsonDepth; call before nlohmann::json::parse on untrusted text.
void check_json_depth(std::string_view text, const std::string& what);

// Characters (code points) of valid UTF-8 text.
size_t utf8_characters(std::string_view s);
// Whether s holds a control character (NUL included); with
// allow_line_breaks, newline, carriage return and tab are text.
bool has_control(std::string_view s, bool allow_line_breaks);

// Run names and metric keys: 1 to 200 bytes of valid UTF-8 without control
// characters. Throws std::invalid_argument naming `what` ("run name",
// "metric key") and quoting the text with excerpt() otherwise.
constexpr size_t kMaxNameBytes = 200;
void check_name(std::string_view name, const char* what);

// JSON text of j with any invalid UTF-8 replaced by U+FFFD: never throws, so
// a reply or an error message cannot crash on the bytes it carries.
std::string safe_dump(const nlohmann::json& j, int indent = -1);

}  // namespace hlat::telemetry
