// Offline detection: a stored run (trained here or ingested) replayed through
// the same detectors, in step order.
#pragma once

#include "detectors/detector.h"
#include "telemetry/reader.h"

#include <vector>

namespace hlat::detectors {

// The run's step records from the store: loss, grad_norm, param_norm, lr and
// heldout_loss at every step where loss or grad_norm was recorded.
std::vector<StepRecord> stored_records(telemetry::Reader& reader, int64_t run);

// Every alert the suite raises over the records, with the policy of each.
std::vector<Fired> replay(const std::vector<StepRecord>& records, const DetectorsConfig& config);

}  // namespace hlat::detectors
