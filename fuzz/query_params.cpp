// Fuzz target: a request's query string and path as the server decodes them,
// then the API's checks of them: UTF-8 at the edge and the integer
// parameters. BadRequest is the expected answer; its message must be
// bounded, escaped UTF-8.
#include "telemetry/untrusted_text.h"
#include "web/json_reply.h"
#include "web/query.h"

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace hlat::web;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input((const char*)data, size);
    const size_t split = input.find('?');
    Request r;
    r.method = "GET";
    r.path = url_decode(input.substr(0, split), false);
    r.query = parse_query(split == std::string::npos ? nullptr : input.c_str() + split + 1);
    try {
        check_request_text(r);
        for (const char* name : {"from", "to", "points", "after"}) int_param(r, name, 0, -1, INT64_MAX / 2);
    } catch (const BadRequest& e) {
        const std::string message = e.what();
        if (!hlat::telemetry::valid_utf8(message) || message.size() > 1000) std::abort();
    }
    return 0;
}
