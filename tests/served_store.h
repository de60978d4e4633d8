// What the tests of a real `hlat serve` start from: a store with one run and
// the options of a server on 127.0.0.1 (any free port) with a known token.
#pragma once

#include "telemetry/writer.h"
#include "test_util.h"
#include "web/server.h"

#include <string>
#include <vector>

namespace hlat::test {

// dir/s.db holding run "r": `steps` loss points (3.0 falling by 0.01, again every 100 steps) and its start event.
inline std::string store_with_a_run(const ScratchDir& dir, int64_t steps = 100) {
    telemetry::Writer w(dir.file("s.db"));
    telemetry::RunRecord r;
    r.name = "r";
    r.source = "ingest";
    const int64_t id = w.open_run(r, false);
    std::vector<telemetry::MetricPoint> points;
    for (int64_t s = 0; s < steps; s++) points.push_back({"loss", s, 3.0 - 0.01 * (double)(s % 100), 1000.0 + (double)s});
    w.metrics(id, std::move(points));
    w.event(id, {"start", 0, 1000.0, "test"});
    return dir.file("s.db");
}

inline web::ServerOptions server_options(const std::string& store, const std::string& token) {
    return {store, "127.0.0.1", 0, std::string(HLAT_SOURCE_DIR) + "/web/static", "", token, {}};
}

}  // namespace hlat::test
