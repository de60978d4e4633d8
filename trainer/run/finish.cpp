#include "trainer/run/finish.h"

#include "trainer/model/weights.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hlat {

int finish_run(RunContext& run, StepHooks& hooks, RunEnd how) {
    hooks.on_end(how);
    const int next = run.trainer.next_step();
    const int64_t last = next - 1;  // index of the last step taken
    switch (how) {
        case RunEnd::Halted:
            run.recorder.finish("halted", last, run.halt_reason);
            spdlog::error("halted after step {}: {}{}", next, run.halt_reason,
                          run.rewinding ? " (rewind_skip: hlat run restarts from an earlier checkpoint and skips the "
                                          "step's batches)"
                                        : "");
            break;
        case RunEnd::Stopped:
            spdlog::warn("stopped by signal {} after step {}", run.stop_signal, next);
            run.recorder.finish("stopped", last, fmt::format("signal {}", run.stop_signal));
            break;
        default:
            run.recorder.finish("finished", last, "reached its steps");
    }
    spdlog::info("{}", run.recorder.summary());
    if (how == RunEnd::Halted) return run.rewinding ? kExitRewind : kExitHalted;
    if (!run.options.save_weights.empty() && run.parallel.is_root()) {
        save_weights(run.trainer.model(), run.options.save_weights);
        spdlog::info("saved weights to {}", run.options.save_weights);
    }
    return how == RunEnd::Stopped ? 128 + run.stop_signal : 0;
}

void finish_crashed(RunContext& run, StepHooks& hooks, const std::string& what) {
    hooks.on_end(RunEnd::Crashed);
    run.recorder.finish("crashed", run.trainer.next_step() - 1, what);
}

}  // namespace hlat
