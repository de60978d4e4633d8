#include "detectors/replay.h"

#include <limits>
#include <map>

namespace hlat::detectors {

std::vector<StepRecord> stored_records(telemetry::Reader& reader, int64_t run) {
    const int64_t all = std::numeric_limits<int64_t>::max();
    std::map<int64_t, StepRecord> by_step;
    auto record = [&](int64_t step) -> StepRecord& {
        auto it = by_step.find(step);
        if (it == by_step.end()) {
            StepRecord r;
            r.step = step;
            r.has_loss = r.has_grad_norm = false;
            it = by_step.emplace(step, r).first;
        }
        return it->second;
    };
    for (const auto& p : reader.series(run, "loss", 0, all)) {
        record(p.step).loss = p.value;
        record(p.step).has_loss = true;
    }
    for (const auto& p : reader.series(run, "grad_norm", 0, all)) {
        record(p.step).grad_norm = p.value;
        record(p.step).has_grad_norm = true;
    }
    auto fill = [&](const char* key, double StepRecord::*field) {
        for (const auto& p : reader.series(run, key, 0, all)) {
            auto it = by_step.find(p.step);
            if (it != by_step.end()) it->second.*field = p.value;
        }
    };
    fill("param_norm", &StepRecord::param_norm);
    fill("lr", &StepRecord::lr);
    fill("heldout_loss", &StepRecord::heldout_loss);
    fill("tp_drift", &StepRecord::tp_drift);
    fill("replica_mismatch", &StepRecord::replica_mismatch);
    // The online detector names the ranks and the tensor; the trainer kept that in an event.
    for (const telemetry::Event& e : reader.events(run))
        if (e.kind == "replica_mismatch")
            if (auto it = by_step.find(e.step); it != by_step.end()) it->second.replica_detail = e.detail;
    std::vector<StepRecord> out;
    for (auto& [step, r] : by_step) out.push_back(r);
    return out;
}

std::vector<Fired> replay(const std::vector<StepRecord>& records, const DetectorsConfig& config) {
    DetectorSuite suite(config);
    std::vector<Fired> out;
    for (const StepRecord& r : records)
        for (Fired& f : suite.observe(r)) out.push_back(std::move(f));
    return out;
}

}  // namespace hlat::detectors
