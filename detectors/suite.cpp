// The detectors run together: each step through every enabled one in the
// registry's order, each alert with its policy, their states as one JSON.
#include "detectors/detector.h"

#include "detectors/registry.h"

#include <algorithm>

namespace hlat::detectors {

using telemetry::Alert;
using json = nlohmann::json;

// The enabled detectors, and the keys and event kinds they read: what says
// which of a run's points the detectors see (a stored run is replayed by
// reading these keys, a run none of whose keys is here is reported as
// unwatched).
DetectorSuite::DetectorSuite(const DetectorsConfig& c) {
    for (Registration (*make)(const DetectorsConfig&) : kDetectors) {
        Registration r = make(c);
        if (r.policy == Policy::Off) continue;
        for (std::string& k : r.keys)
            if (!reads(k)) keys_.push_back(std::move(k));
        for (std::string& e : r.events)
            if (!reads_event(e)) event_kinds_.push_back(std::move(e));
        detectors_.push_back({r.name, std::move(r.detector), r.policy});
    }
}

bool DetectorSuite::reads(const std::string& key) const {
    return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

bool DetectorSuite::reads_event(const std::string& kind) const {
    return std::find(event_kinds_.begin(), event_kinds_.end(), kind) != event_kinds_.end();
}

DetectorSuite::~DetectorSuite() = default;

// A note (severity info) halts nothing, with one exception: a one-step loss
// outlier is the signature of a bad batch (the model is back to normal at the
// next step), which is exactly what rewind_skip exists to skip.
static Policy policy_for(const Alert& a, Policy configured) {
    if (a.severity != "info" || configured == Policy::Warn) return configured;
    if (configured == Policy::RewindSkip && a.kind == "loss_jump") return configured;
    return Policy::Warn;
}

std::vector<Fired> DetectorSuite::observe(const StepView& s) {
    std::vector<Fired> out;
    for (Entry& e : detectors_) {
        std::vector<Alert> alerts;
        e.detector->observe(s, alerts);
        for (Alert& a : alerts) {
            const Policy p = policy_for(a, e.policy);
            out.push_back({std::move(a), p});
        }
    }
    return out;
}

json DetectorSuite::state() const {
    json out = json::object();
    for (const Entry& e : detectors_) {
        json s = e.detector->state();
        if (!s.is_null()) out[e.name] = std::move(s);
    }
    return out;
}

void DetectorSuite::restore(const json& state) {
    for (Entry& e : detectors_)
        if (state.contains(e.name)) e.detector->restore(state.at(e.name));
}

}  // namespace hlat::detectors
