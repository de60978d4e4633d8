// Fuzz target: the API's request router over a store holding one run. The
// input is split at newlines into method, path, query string, token and body
// (the rest); every request must get a reply (handle() is total) whose body
// is JSON in valid UTF-8, and a 5xx is a crash: bad input is the client's error.
#include "telemetry/untrusted_text.h"
#include "telemetry/writer.h"
#include "web/api.h"
#include "web/query.h"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

using namespace hlat;

namespace {

const std::string kToken = "fuzz-token-0123456789";

web::Api& api() {
    static const std::string store = "/tmp/hlat_fuzz_api_" + std::to_string(getpid()) + ".db";
    static web::Api* instance = [] {
        std::filesystem::remove(store);
        {
            telemetry::Writer w(store);
            telemetry::RunRecord r;
            r.name = "r";
            r.source = "ingest";
            int64_t id = w.open_run(r, false);
            for (int s = 0; s < 300; s++) w.metric(id, "loss", s, 3.0 - 0.001 * s, 1000.0 + s);
            w.alert(id, {"grad_spike", "warning", 150, "a spike", "{}", 1150.0});
        }
        std::atexit([] {
            for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(store + suffix);
        });
        return new web::Api(store, kToken);
    }();
    return *instance;
}

std::string next_field(std::string_view& rest) {
    size_t nl = rest.find('\n');
    std::string field(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return field;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view rest((const char*)data, size);
    web::Request r;
    r.method = next_field(rest) == "POST" ? "POST" : "GET";
    r.path = web::url_decode("/api/v1/" + next_field(rest), false);
    std::string query = next_field(rest);
    r.query = web::parse_query(query.c_str());
    r.token = next_field(rest) == "t" ? kToken : "";
    r.body = std::string(rest);
    r.remote = "127.0.0.1";
    web::Response reply = api().handle(r);
    if (reply.status >= 500 || reply.status < 200) std::abort();
    if (reply.content_type == "application/json") {
        if (!telemetry::valid_utf8(reply.body)) std::abort();
        if (nlohmann::json::parse(reply.body, nullptr, false).is_discarded()) std::abort();
    }
    return 0;
}
