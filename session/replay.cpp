#include "session/replay.h"

#include <algorithm>
#include <limits>
#include <map>

namespace hlat::session {

using detectors::StepView;

namespace {

StepView& view_at(std::map<int64_t, StepView>& by_step, int64_t step) {
    auto it = by_step.find(step);
    if (it == by_step.end()) {
        it = by_step.emplace(step, StepView{}).first;
        it->second.step = step;
    }
    return it->second;
}

// Events of the kinds the detectors read join the views of their steps in
// [first, last] (a step may bring its event before its values); other events
// (a checkpoint, a heartbeat) are no step of the detectors'.
std::vector<StepView> in_order(std::map<int64_t, StepView>& by_step, const std::vector<telemetry::Event>& events,
                               const detectors::DetectorSuite& suite, int64_t first = 0,
                               int64_t last = std::numeric_limits<int64_t>::max()) {
    for (const telemetry::Event& e : events)
        if (suite.reads_event(e.kind) && e.step >= first && e.step <= last) view_at(by_step, e.step).events.push_back(e);
    std::vector<StepView> out;
    out.reserve(by_step.size());
    for (auto& [step, view] : by_step) out.push_back(std::move(view));
    return out;
}

}  // namespace

std::vector<StepView> steps_from(const std::vector<telemetry::MetricPoint>& points,
                                 const std::vector<telemetry::Event>& events, const detectors::DetectorSuite& suite,
                                 const std::vector<telemetry::VectorPoint>& vectors) {
    std::map<int64_t, StepView> by_step;
    for (const telemetry::MetricPoint& p : points)
        if (suite.reads(p.key)) view_at(by_step, p.step).values[p.key] = p.value;
    for (const telemetry::VectorPoint& v : vectors)
        if (suite.reads(v.key)) view_at(by_step, v.step).vectors[v.key] = {v.values, v.labels};
    return in_order(by_step, events, suite);
}

void for_each_stored_step(telemetry::Reader& reader, int64_t run, const detectors::DetectorSuite& suite,
                          const std::function<void(const StepView&)>& visit) {
    constexpr int64_t kChunk = 16384;  // steps read at a time
    std::vector<telemetry::Event> events = reader.events(run);
    int64_t last = -1;
    for (const std::string& key : suite.keys())
        last = std::max({last, reader.last_step(run, key).value_or(-1), reader.last_vector_step(run, key).value_or(-1)});
    for (const telemetry::Event& e : events)
        if (suite.reads_event(e.kind)) last = std::max(last, e.step);
    for (int64_t first = 0; first <= last;) {
        std::map<int64_t, StepView> by_step;
        for (const std::string& key : suite.keys()) {
            for (const auto& p : reader.series(run, key, first, first + kChunk - 1))
                view_at(by_step, p.step).values[key] = p.value;
            for (auto& v : reader.vector_series(run, key, first, first + kChunk - 1))
                view_at(by_step, v.step).vectors[key] = {std::move(v.values), std::move(v.labels)};
        }
        for (const StepView& v : in_order(by_step, events, suite, first, first + kChunk - 1)) visit(v);
        first += kChunk;
        if (!by_step.empty()) continue;
        // An empty range: steps may be sparse (a log numbering them in tokens), jump to the next stored one.
        int64_t next = last + 1;
        for (const std::string& key : suite.keys())
            for (const auto& b : reader.downsample(run, key, first, last, 1)) next = std::min(next, b.first_step);
        for (const telemetry::Event& e : events)
            if (suite.reads_event(e.kind) && e.step >= first) next = std::min(next, e.step);
        first = std::max(first, next);
    }
}

std::vector<detectors::Fired> replay(const std::vector<StepView>& steps, const detectors::DetectorsConfig& config) {
    detectors::DetectorSuite suite(config);
    std::vector<detectors::Fired> out;
    for (const StepView& s : steps)
        for (detectors::Fired& f : suite.observe(s)) out.push_back(std::move(f));
    return out;
}

std::vector<detectors::Fired> replay_stored(telemetry::Reader& reader, int64_t run,
                                            const detectors::DetectorsConfig& config, long* steps) {
    detectors::DetectorSuite suite(config);
    std::vector<detectors::Fired> out;
    long seen = 0;
    for_each_stored_step(reader, run, suite, [&](const StepView& s) {
        seen++;
        for (detectors::Fired& f : suite.observe(s)) out.push_back(std::move(f));
    });
    if (steps) *steps = seen;
    return out;
}

}  // namespace hlat::session
