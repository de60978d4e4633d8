#include "session/flight_recorder.h"

#include <algorithm>

namespace hlat::session {

FlightRecorder::FlightRecorder(int steps, int store_every) : steps_(steps), store_every_(std::max(1, store_every)) {}

std::vector<telemetry::VectorPoint> FlightRecorder::record(std::vector<telemetry::VectorPoint> points) {
    std::vector<telemetry::VectorPoint> store;
    for (telemetry::VectorPoint& p : points) {
        const bool stored = p.step % store_every_ == 0;
        if (stored) store.push_back(p);
        if (steps_ > 0) held_.push_back({std::move(p), stored});
    }
    if (held_.empty()) return store;
    int64_t newest = 0;
    for (const Held& h : held_) newest = std::max(newest, h.point.step);
    // A step sent again (a re-sent batch) may arrive out of order: drop by step, not by position.
    std::erase_if(held_, [&](const Held& h) { return h.point.step <= newest - steps_; });
    return store;
}

std::optional<FlightRecorder::Window> FlightRecorder::take_window() {
    if (held_.empty()) return std::nullopt;
    Window w{held_.front().point.step, held_.front().point.step, {}};
    for (Held& h : held_) {
        w.first_step = std::min(w.first_step, h.point.step);
        w.last_step = std::max(w.last_step, h.point.step);
        if (h.stored) continue;
        h.stored = true;
        w.unstored.push_back(h.point);
    }
    return w;
}

std::vector<const telemetry::VectorPoint*> FlightRecorder::series(const std::string& key) const {
    std::vector<const telemetry::VectorPoint*> out;
    for (const Held& h : held_)
        if (h.point.key == key) out.push_back(&h.point);
    std::stable_sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->step < b->step; });
    return out;
}

}  // namespace hlat::session
