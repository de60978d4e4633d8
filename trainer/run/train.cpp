#include "trainer/run/train.h"

#include "trainer/run/build.h"
#include "trainer/run/finish.h"
#include "trainer/run/loop.h"
#include "trainer/run/stop_signals.h"

namespace hlat {

int train(const TrainConfig& config, const TrainOptions& options) {
    StopSignals signals;
    BuiltRun built(config, options);
    RunContext& run = built.context();
    RunEnd how;
    try {
        how = run_loop(run, built.hooks());
    } catch (const std::exception& e) {
        finish_crashed(run, built.hooks(), e.what());
        throw;
    }
    return finish_run(run, built.hooks(), how);
}

}  // namespace hlat
