// The parts of a training run that only a distributed job has: the shared
// initialisation of tensor-parallel shards, the periodic consistency checks
// (replica hashes, TP drift, re-sync) and what they report, agreement on
// stopping, and the rank layout printed at the start.
#pragma once

#include "detectors/detector.h"
#include "trainer/config.h"
#include "trainer/model.h"
#include "trainer/parallel.h"
#include "trainer/run_telemetry.h"
#include "trainer/trainer.h"

#include <string>

namespace hlat {

// Every rank starts from the same whole model (the seed's), of which it keeps
// its tensor-parallel shard: a run at any layout starts where a single
// process would.
void init_shard_weights(Model& model, unsigned long long seed);

// Whether the step that makes `done` steps is one of parallel.check_every.
bool is_check_step(const ParallelConfig& pc, int done);

// After step s, on every rank: on check steps the DP replica hashes (with the
// step's gradient check, when it made one) and the TP drift, recorded by rank 0
// in the store and in the detectors' record; on resync steps the replicated
// weights are re-synced from TP rank 0.
void check_consistency(Parallel& parallel, const ParallelConfig& pc, Model& model, const StepStats& s,
                       RunTelemetry& store, detectors::StepRecord& record);

// Brings every rank's stop and halt decisions together after a step: a signal
// may reach one rank only, and only rank 0 runs the detectors. Returns the
// signal (0: none); sets halt_reason on every rank when rank 0 halts.
int agree_on_stop(Parallel& parallel, int signal, std::string& halt_reason);

// Rank layout at the start of a distributed run: which host each rank is on
// and which groups it belongs to (printed by rank 0).
void log_layout(Parallel& parallel);

}  // namespace hlat
