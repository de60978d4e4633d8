// Offline detection: a stored run (trained here or ingested) replayed through
// the same detectors, in step order.
#pragma once

#include "detectors/detector.h"
#include "telemetry/reader.h"

#include <functional>
#include <vector>

namespace hlat::detectors {

// The run's step records from the store: one per step at which any key the
// detectors read (detector_keys()) was recorded, in step order.
std::vector<StepRecord> stored_records(telemetry::Reader& reader, int64_t run);

// The same records handed to `visit` one by one, read a range of steps at a
// time: memory stays bounded however long the run (a server that restarts
// replays every ingested run's history into its monitors).
void for_each_stored_record(telemetry::Reader& reader, int64_t run, const std::function<void(const StepRecord&)>& visit);

// The same from points and events as they arrive (a batch of a followed log
// or of an HTTP ingest): what stored_records gives once they are stored.
std::vector<StepRecord> records_from(const std::vector<telemetry::MetricPoint>& points,
                                     const std::vector<telemetry::Event>& events);

// Every alert the suite raises over the records, with the policy of each.
std::vector<Fired> replay(const std::vector<StepRecord>& records, const DetectorsConfig& config,
                          Source source = Source::Embedded);

// The source whose words a stored run's alerts use.
Source source_of(const telemetry::RunRecord& run);

}  // namespace hlat::detectors
