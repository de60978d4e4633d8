#include "trainer/run/loop.h"

#include "trainer/run/distributed_run.h"
#include "trainer/run/stop_signals.h"

namespace hlat {

// A signal may reach one rank only, and only rank 0 raises alerts: every
// rank leaves the loop after the same step.
static bool agree_to_end(RunContext& run) {
    run.stop_signal = agree_on_stop(run.parallel, StopSignals::received(), run.halt_reason, run.rewinding);
    return run.stop_signal != 0 || run.halting();
}

RunEnd run_loop(RunContext& run, StepHooks& hooks) {
    Trainer& trainer = run.trainer;
    hooks.on_start();
    bool ending = agree_to_end(run);  // the probe before the first step may have halted
    while (!ending && trainer.next_step() < run.total_steps) {
        StepRequest request;
        hooks.before_step(trainer.next_step(), request);
        if (!request.drop_sequences.empty()) trainer.drop_sequences_next_step(std::move(request.drop_sequences));
        const StepStats stats = trainer.step(request.tensor_norms, request.hash_grads);
        StepResult result{stats, {}};
        hooks.after_step(result);
        ending = agree_to_end(run);
    }
    if (run.halting()) return RunEnd::Halted;
    return run.stop_signal ? RunEnd::Stopped : RunEnd::Finished;
}

}  // namespace hlat
