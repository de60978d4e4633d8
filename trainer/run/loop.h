// The loop phase of a training run: the steps and the hooks around them, in
// order, until the run has its steps, a signal stops it or an alert halts it.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

// Finished, Stopped (run.stop_signal says which signal) or Halted (the
// alert router's halt reason says why), agreed by every rank. Exceptions
// from the step or the hooks pass through: the caller ends the run as crashed.
RunEnd run_loop(RunContext& run, StepHooks& hooks);

}  // namespace hlat
