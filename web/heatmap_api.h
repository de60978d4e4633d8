// GET /api/v1/runs/{run}/heatmap?key=K[&buckets=N][&from=S][&to=S][&reduce=max|min|mean|last]:
// a statistic over layers, heads or tensors as element x step cells. The
// steps in at most N (default 2000, at most 10,000) buckets of equal width,
// each element's values in a bucket reduced as `reduce` says (default: the
// catalogue's, telemetry/metric_catalogue.h). Reply:
//   {"key", "title", "unit", "reduce", "log_scale", "labels": [...],
//    "steps": [[first, last], ...] per bucket,
//    "values": [[v per label], ...] per bucket (null: no finite value)}
#pragma once

#include "telemetry/reader.h"
#include "web/api.h"

namespace hlat::web {

Response heatmap_reply(telemetry::Reader& reader, int64_t run, const Request& r);

}  // namespace hlat::web
