#include "detectors/replay.h"

#include <limits>
#include <map>

namespace hlat::detectors {
namespace {

StepRecord& record_at(std::map<int64_t, StepRecord>& by_step, int64_t step) {
    auto it = by_step.find(step);
    if (it == by_step.end()) {
        StepRecord r;
        r.step = step;
        r.has_loss = r.has_grad_norm = false;
        it = by_step.emplace(step, r).first;
    }
    return it->second;
}

std::vector<StepRecord> in_order(std::map<int64_t, StepRecord>& by_step,
                                 const std::vector<telemetry::Event>& events) {
    // The replica check names the ranks and the tensor in an event of its step.
    for (const telemetry::Event& e : events)
        if (e.kind == "replica_mismatch")
            if (auto it = by_step.find(e.step); it != by_step.end()) it->second.replica_detail = e.detail;
    std::vector<StepRecord> out;
    for (auto& [step, r] : by_step) out.push_back(std::move(r));
    return out;
}

}  // namespace

std::vector<StepRecord> stored_records(telemetry::Reader& reader, int64_t run) {
    std::vector<StepRecord> out;
    for_each_stored_record(reader, run, [&](const StepRecord& r) { out.push_back(r); });
    return out;
}

void for_each_stored_record(telemetry::Reader& reader, int64_t run, const std::function<void(const StepRecord&)>& visit) {
    constexpr int64_t kChunk = 16384;  // steps read at a time
    std::vector<telemetry::Event> events = reader.events(run);
    int64_t last = -1;
    for (const std::string& key : detector_keys()) last = std::max(last, reader.last_step(run, key).value_or(-1));
    for (int64_t first = 0; first <= last;) {
        std::map<int64_t, StepRecord> by_step;
        for (const std::string& key : detector_keys())
            for (const auto& p : reader.series(run, key, first, first + kChunk - 1))
                apply_metric(record_at(by_step, p.step), key, p.value);
        for (const StepRecord& r : in_order(by_step, events)) visit(r);
        first += kChunk;
        if (!by_step.empty()) continue;
        // An empty range: steps may be sparse (a log numbering them in tokens), jump to the next stored one.
        int64_t next = last + 1;
        for (const std::string& key : detector_keys())
            for (const auto& b : reader.downsample(run, key, first, last, 1)) next = std::min(next, b.first_step);
        first = std::max(first, next);
    }
}

std::vector<StepRecord> records_from(const std::vector<telemetry::MetricPoint>& points,
                                     const std::vector<telemetry::Event>& events) {
    std::map<int64_t, StepRecord> by_step;
    StepRecord scratch;
    for (const telemetry::MetricPoint& p : points)
        if (apply_metric(scratch, p.key, p.value)) apply_metric(record_at(by_step, p.step), p.key, p.value);
    return in_order(by_step, events);
}

std::vector<Fired> replay(const std::vector<StepRecord>& records, const DetectorsConfig& config, Source source) {
    DetectorSuite suite(config, source);
    std::vector<Fired> out;
    for (const StepRecord& r : records)
        for (Fired& f : suite.observe(r)) out.push_back(std::move(f));
    return out;
}

Source source_of(const telemetry::RunRecord& run) {
    return run.source == "hlat" ? Source::Embedded : Source::External;
}

}  // namespace hlat::detectors
