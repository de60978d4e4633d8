#include "session/ingest_parsed.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace hlat::session {
namespace {

// The rows of `from` from `at` on whose step is at most `last`. Rows come in
// step order; one out of order waits for a later part (the last part takes
// every row left).
template <typename T>
std::vector<T> take_through(std::vector<T>& from, size_t& at, int64_t last) {
    std::vector<T> out;
    while (at < from.size() && from[at].step <= last) out.push_back(std::move(from[at++]));
    return out;
}

}  // namespace

std::vector<detectors::Fired> ingest_parsed(RunSession& session, telemetry::ParsedBatch parsed) {
    if (parsed.batches.empty())
        return session.ingest(std::move(parsed.points), std::move(parsed.events), std::move(parsed.vectors));
    std::vector<detectors::Fired> fired;
    size_t point = 0, event = 0, vector = 0;
    const size_t n = parsed.batches.size();
    for (size_t first = 0; first < n; first += kBatchStepsPerPart) {
        const size_t end = std::min(first + kBatchStepsPerPart, n);
        for (size_t i = first; i < end; i++) session.batch(telemetry::batch_record(parsed.batches[i]));
        const int64_t last = end == n ? std::numeric_limits<int64_t>::max() : parsed.batches[end - 1].step;
        auto points = take_through(parsed.points, point, last);
        auto events = take_through(parsed.events, event, last);
        auto vectors = take_through(parsed.vectors, vector, last);
        if (points.empty() && events.empty() && vectors.empty()) continue;
        for (detectors::Fired& f : session.ingest(std::move(points), std::move(events), std::move(vectors)))
            fired.push_back(std::move(f));
    }
    return fired;
}

}  // namespace hlat::session
