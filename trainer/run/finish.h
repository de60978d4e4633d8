// The finish phase of a training run: the hooks' last acts (the final
// held-out evaluation and checkpoint), the run's status in the store, the
// closing lines, --save's weights, and the process's exit code.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

// 0 when finished, kExitHalted when halted, 128 + N when signal N stopped it.
int finish_run(RunContext& run, StepHooks& hooks, RunEnd how);

// After an exception in the loop: the hooks hear of it (and do nothing
// collective), the store records the crash with its message.
void finish_crashed(RunContext& run, StepHooks& hooks, const std::string& what);

}  // namespace hlat
