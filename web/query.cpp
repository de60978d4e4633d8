#include "web/query.h"

#include <civetweb.h>

#include <sstream>

namespace hlat::web {

std::string url_decode(const std::string& s, bool form) {
    std::string out(s.size() + 1, '\0');
    int n = mg_url_decode(s.data(), (int)s.size(), out.data(), (int)out.size(), form ? 1 : 0);
    out.resize(n < 0 ? 0 : n);
    return out;
}

std::map<std::string, std::string> parse_query(const char* query) {
    std::map<std::string, std::string> out;
    if (!query) return out;
    std::stringstream ss(query);
    for (std::string pair; std::getline(ss, pair, '&');) {
        size_t eq = pair.find('=');
        out[url_decode(pair.substr(0, eq), true)] = eq == std::string::npos ? "" : url_decode(pair.substr(eq + 1), true);
    }
    return out;
}

}  // namespace hlat::web
