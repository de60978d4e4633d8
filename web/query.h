// The query string and path of a request, decoded (%XX and, in a query, '+'
// as a space). The bytes that come out are not checked here: the API checks
// them as UTF-8 before anything reads them (check_request_text).
#pragma once

#include <map>
#include <string>

namespace hlat::web {

std::string url_decode(const std::string& s, bool form);

// "a=1&b=x%20y" -> {a: 1, b: x y}; a later repeat of a name wins.
std::map<std::string, std::string> parse_query(const char* query);

}  // namespace hlat::web
