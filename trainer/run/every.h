// Step numbering, one convention for the whole trainer.
//
// A step's index is 0-based: the first optimizer step is step 0, and the
// store, alerts, logs' "step" fields and checkpoint state count this way.
// `done` is how many steps have completed: after the step of index i,
// done = i + 1 (checkpoint folder names, --steps and the progress line's
// "step 120/2000" count this way).
//
// Something that happens "every N steps" happens when `done` is a multiple of
// N: after the step of index N - 1, 2N - 1, ... A decision made before a step
// (measure tensor norms during it) uses the steps done before it; one made
// for after the step (hash its gradients for the check that follows it) uses
// the steps done after it. N = 0 means never.
#pragma once

namespace hlat {

inline bool every(int n, long done) { return n > 0 && done % n == 0; }

}  // namespace hlat
