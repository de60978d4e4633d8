// Requests to web::Api as the server would hand them over (from 127.0.0.1),
// for tests that call the API's router in-process.
#pragma once

#include "web/api.h"

#include <map>
#include <string>
#include <utility>

namespace hlat::test {

inline web::Request get(const std::string& path, std::map<std::string, std::string> query = {}) {
    return {"GET", path, std::move(query), "", "", "127.0.0.1"};
}

inline web::Request post(const std::string& path, const std::string& token, const std::string& body = "") {
    return {"POST", path, {}, token, body, "127.0.0.1"};
}

}  // namespace hlat::test
