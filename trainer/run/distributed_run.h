// The parts of a training run that only a distributed job has: the shared
// initialisation of tensor-parallel shards, agreement on stopping, and the
// rank layout printed at the start (the consistency checks are a hook:
// consistency_hook.h).
#pragma once

#include "trainer/model/model.h"
#include "trainer/parallel/parallel.h"

#include <string>

namespace hlat {

// Every rank starts from the same whole model (the seed's), of which it keeps
// its tensor-parallel shard: a run at any layout starts where a single
// process would.
void init_shard_weights(Model& model, unsigned long long seed);

// Brings every rank's stop and halt decisions together after a step: a signal
// may reach one rank only, and only rank 0 runs the detectors. Returns the
// signal (0: none); sets halt_reason on every rank when rank 0 halts, and
// `rewinding` when its halt is rewind_skip's.
int agree_on_stop(Parallel& parallel, int signal, std::string& halt_reason, bool& rewinding);

// Rank layout at the start of a distributed run: which host each rank is on
// and which groups it belongs to (printed by rank 0).
void log_layout(Parallel& parallel);

}  // namespace hlat
