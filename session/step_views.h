// Steps as the detectors see them, from a batch of points or from the store,
// and a stored run replayed through the detectors (`hlat detect`). Both build
// the same views from the same points: only the keys and event kinds the
// suite reads, one view per step that has a value of one of those keys.
#pragma once

#include "detectors/detector.h"
#include "telemetry/reader.h"

#include <functional>
#include <vector>

namespace hlat::session {

// A batch's points, events and vectors as views, in step order.
std::vector<detectors::StepView> steps_from(const std::vector<telemetry::MetricPoint>& points,
                                            const std::vector<telemetry::Event>& events,
                                            const detectors::DetectorSuite& suite,
                                            const std::vector<telemetry::VectorPoint>& vectors = {});

// The stored run's views from step `first` on, handed to `visit` in step
// order: a merge of each key's rows and of the events of the kinds the suite
// reads, each read a window at a time (memory bounded whatever the run holds).
void for_each_stored_step(telemetry::Reader& reader, int64_t run, const detectors::DetectorSuite& suite,
                          const std::function<void(const detectors::StepView&)>& visit, int64_t first = 0);

// Every alert the detectors raise over the views, with its policy.
std::vector<detectors::Fired> replay(const std::vector<detectors::StepView>& steps,
                                     const detectors::DetectorsConfig& config);

// A stored run replayed with `config`; *steps counts the views seen.
std::vector<detectors::Fired> replay_stored(telemetry::Reader& reader, int64_t run,
                                            const detectors::DetectorsConfig& config, long* steps = nullptr);

}  // namespace hlat::session
