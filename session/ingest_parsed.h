// A parsed piece of a log or of an HTTP body into its run's session: what
// `hlat ingest` (once or following) and POST /api/v1/runs/{run}/ingest share,
// so that both keep an external trainer's batch ids the same way.
#pragma once

#include "detectors/detector.h"
#include "session/run_session.h"
#include "telemetry/ingest.h"

#include <cstddef>
#include <vector>

namespace hlat::session {

constexpr size_t kBatchStepsPerPart = 16;

// Hands `parsed` to `session`: its points, events and vectors
// (RunSession::ingest), and each step's batch ids as that step's batch
// record (RunSession::batch) before the step is detected, so that a
// rewind_skip alert at the step lists them in its plan. The session keeps
// the last 64 records: a piece with many steps of ids (a backlog, a whole
// file) goes in parts of kBatchStepsPerPart such steps, each part's records
// first, so an alert anywhere finds at least the 48 steps before it.
// Returns the alerts raised.
std::vector<detectors::Fired> ingest_parsed(RunSession& session, telemetry::ParsedBatch parsed);

}  // namespace hlat::session
