#include "session/step_views.h"

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

namespace {

// One key's stored points from a step on, read a window at a time.
template <class Point>
class Cursor {
  public:
    using Read = std::function<std::vector<Point>(int64_t first, int64_t limit)>;
    Cursor(std::string key, Read read, int64_t first, int64_t window)
        : key(std::move(key)), read_(std::move(read)), next_(first), window_(window) {}
    // The next point, or null when none is left.
    Point* head() {
        if (pos_ == buf_.size() && !done_) refill();
        return pos_ < buf_.size() ? &buf_[pos_] : nullptr;
    }
    Point take() { return std::move(buf_[pos_++]); }
    const std::string key;

  private:
    void refill() {
        buf_ = read_(next_, window_);
        pos_ = 0;
        done_ = (int64_t)buf_.size() < window_;
        if (!buf_.empty()) next_ = buf_.back().step + 1;
    }
    Read read_;
    std::vector<Point> buf_;
    size_t pos_ = 0;
    int64_t next_, window_;
    bool done_ = false;
};

// The events the detectors read, in step order, their details read 256 at a
// time: a run whose trainer logs a 2 KB alert every step holds hundreds of
// MB of them, which a catch-up once read whole (a server's memory rose by
// that much each time it opened such a run again).
class EventCursor {
  public:
    EventCursor(telemetry::Reader& reader, int64_t run, const std::vector<std::string>& kinds, int64_t first)
        : reader_(reader), ids_(reader.event_ids_of(run, kinds, first)) {}
    const telemetry::Event* head() {
        if (pos_ == buf_.size() && next_id_ < ids_.size()) refill();
        return pos_ < buf_.size() ? &buf_[pos_] : nullptr;
    }
    telemetry::Event take() { return std::move(buf_[pos_++]); }

  private:
    void refill() {
        const size_t end = std::min(ids_.size(), next_id_ + 256);
        buf_ = reader_.events_by_id(std::vector<int64_t>(ids_.begin() + (std::ptrdiff_t)next_id_,
                                                         ids_.begin() + (std::ptrdiff_t)end));
        next_id_ = end;
        pos_ = 0;
    }
    telemetry::Reader& reader_;
    std::vector<int64_t> ids_;
    size_t next_id_ = 0;
    std::vector<telemetry::Event> buf_;
    size_t pos_ = 0;
};

}  // namespace

// A merge of every key's points in step order: each stored row is read once
// whatever the steps' spacing (a range of steps at a time, with steps a
// million apart, read each range's one step and searched for the next: 61 s
// for 2,000 steps).
void for_each_stored_step(telemetry::Reader& reader, int64_t run, const detectors::DetectorSuite& suite,
                          const std::function<void(const StepView&)>& visit, int64_t first) {
    constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
    std::vector<Cursor<telemetry::SeriesPoint>> scalars;
    std::vector<Cursor<telemetry::VectorPoint>> vectors;
    for (const std::string& key : suite.keys()) {
        scalars.emplace_back(key, [&, key](int64_t from, int64_t n) { return reader.series(run, key, from, kEnd, n); },
                             first, 4096);
        vectors.emplace_back(
            key, [&, key](int64_t from, int64_t n) { return reader.vector_series(run, key, from, kEnd, n); }, first, 256);
    }
    EventCursor events(reader, run, suite.event_kinds(), first);
    for (;;) {
        int64_t step = kEnd;
        for (auto& c : scalars)
            if (auto* p = c.head()) step = std::min(step, p->step);
        for (auto& c : vectors)
            if (auto* p = c.head()) step = std::min(step, p->step);
        if (auto* e = events.head()) step = std::min(step, e->step);
        if (step == kEnd) return;
        StepView v;
        v.step = step;
        for (auto& c : scalars)
            if (auto* p = c.head(); p && p->step == step) v.values[c.key] = c.take().value;
        for (auto& c : vectors)
            if (auto* p = c.head(); p && p->step == step) {
                telemetry::VectorPoint point = c.take();
                v.vectors[c.key] = {std::move(point.values), std::move(point.labels)};
            }
        while (events.head() && events.head()->step == step) v.events.push_back(events.take());
        visit(v);
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
