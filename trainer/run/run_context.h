// What the phases and hooks of one training run share. The build phase
// (build.h) owns every piece; hooks keep a reference to the context.
#pragma once

#include "trainer/config/config.h"
#include "trainer/parallel/parallel.h"
#include "trainer/run/run_data.h"
#include "trainer/run/run_recorder.h"
#include "trainer/run/train.h"
#include "trainer/trainer.h"

namespace hlat {

struct RunContext {
    const TrainConfig& config;
    const TrainOptions& options;
    Parallel& parallel;
    RunData& data;
    Trainer& trainer;
    RunRecorder& recorder;
    const int total_steps;  // the run ends when this many steps are done
    const int first_step;   // index of this process's first step (> 0 when resumed)
    int stop_signal = 0;    // the signal that stopped the run, agreed by every rank
    // The first halting alert (rank 0's session), "" while none; the stop
    // agreement sets it on the other ranks.
    std::string halt_reason;
    bool rewinding = false;  // the halt is rewind_skip's: the supervisor restarts from an earlier checkpoint
    bool halting() const { return !halt_reason.empty(); }
};

}  // namespace hlat
