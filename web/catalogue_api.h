// The metric catalogue (telemetry/metric_catalogue.h) as the API serves it:
//   GET /api/v1/catalogue[?keys=K1,K2&rank_keys=R1,R2]
//       {"table": [row...], "shared_panels": [{"id", "title", "shade"}...], "rule": "..."}, and with
//       keys or rank_keys (at most kMaxCatalogueKeys in all) their entries and
//       charts as in the run's form below
//   GET /api/v1/runs/{run}/keys
//       {"keys": [...], "rank_keys": [...], "metrics": {KEY: entry}, "rank_metrics": {KEY: entry},
//        "panels": [{"id", "title", "unit", "shade", "per_rank", "keys": [...]}, ...]}
// An entry is {"title", "unit", "group", "panel", "shown", "derived"}; a table
// row adds "key" (a pattern for a family) and "per_rank". The page asks for a
// run's keys once and draws its charts from the answer.
#pragma once

#include "telemetry/reader.h"
#include "web/api.h"

#include <cstdint>

namespace hlat::web {

constexpr size_t kMaxCatalogueKeys = 256;

Response catalogue_reply(const Request& r);
Response keys_reply(telemetry::Reader& reader, int64_t run, const Request& r);

}  // namespace hlat::web
