// `hlat replay`: re-runs one step of a stored run from the newest checkpoint
// at or before it, bit-exactly (single process, or under mpirun at the run's
// layout), and compares what comes back with what the store holds: the loss
// and gradient norm of every step replayed, each sequence's loss per rank at
// the step, and its per-tensor gradient norms where the store kept them.
//
//   reproducible      the same numbers come back: the event is the data's or
//                     the optimisation's, and will happen again from that state
//   not reproducible  they differ: hardware, silent data corruption or
//                     nondeterminism; the report names the first step that
//                     differs, the ranks whose sequences differ and the tensor
//                     that differs most
//
// With `without`, the step is run once more leaving out its highest-loss
// sequences, to show whether they alone made the spike. What the replay keeps
// of the run's faults is the data's (bad_batch: it lives in the stream); the
// rest (sdc, grad_spike, lr_spike, ...) are the events being diagnosed.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hlat {

struct ReplayOptions {
    std::string store;    // the run's store
    std::string run;      // its name there
    int step = -1;        // the step to replay (0-based, as stored)
    int without = 0;      // also re-run the step without its N highest-loss sequences
    std::string scratch;  // a folder for the replay's own files ("": a temporary one)
};

// The report (docs/provenance.md): {"verdict": "reproducible" | "not
// reproducible", "from_checkpoint", "steps": [...], "first_difference", ...}.
// Every rank calls it under mpirun; rank 0 gets the report, the others null.
// Throws with a message for the user on bad input (no such run or step, a
// run with no config, a step the store has no loss for).
nlohmann::json replay_step(const ReplayOptions& options);

// The report as a few lines for a person.
std::string describe_replay(const nlohmann::json& report);

}  // namespace hlat
