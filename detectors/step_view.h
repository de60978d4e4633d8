// One step as the detectors see it: the values recorded at it, by name, and
// its events. Every source (the embedded trainer, a followed log, the HTTP
// endpoint, a stored run replayed) builds the same view from the same named
// points, so the same points give the same alerts. A key that was not
// recorded at this step is absent, which is not the same as a NaN value.
#pragma once

#include "telemetry/records.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hlat::detectors {

// A statistic over layers, heads or tensors at one step, with its element names.
struct VectorValue {
    std::vector<float> values;
    std::shared_ptr<const std::vector<std::string>> labels;  // may be null: elements are numbered
    std::string label(size_t i) const {
        return labels && i < labels->size() ? (*labels)[i] : std::to_string(i);
    }
};

struct StepView {
    int64_t step = 0;
    std::map<std::string, double> values;
    std::map<std::string, VectorValue> vectors;
    std::vector<telemetry::Event> events;  // e.g. "replica_mismatch" with which ranks and tensor

    bool has(const std::string& key) const { return values.count(key) > 0; }
    // NaN when the key was not recorded at this step.
    double value(const std::string& key) const {
        auto it = values.find(key);
        return it == values.end() ? NAN : it->second;
    }
    // Null when the key was not recorded at this step.
    const VectorValue* vector(const std::string& key) const {
        auto it = vectors.find(key);
        return it == vectors.end() ? nullptr : &it->second;
    }
    // The detail of this step's last event of `kind`, "" when it has none.
    std::string detail(const std::string& kind) const {
        for (auto it = events.rbegin(); it != events.rend(); ++it)
            if (it->kind == kind) return it->detail;
        return "";
    }
    // Adds what a later part of the same step brought (a batch cut mid-step).
    void merge(const StepView& later) {
        for (const auto& [key, v] : later.values) values[key] = v;
        for (const auto& [key, v] : later.vectors) vectors[key] = v;
        events.insert(events.end(), later.events.begin(), later.events.end());
    }
};

}  // namespace hlat::detectors
