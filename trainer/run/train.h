// `hlat train` as a library call: a training run in three phases, each in its
// own file. build.cpp sets it up (parallel layout, resume decision, data,
// trainer, weights, banner, recorder, hooks); loop.cpp orders the steps and
// the hooks around them (step_hook.h) and returns how the run ended;
// finish.cpp ends it (the hooks' last acts, the run's status, --save).
//
// Words: a "run" is one training job as the store knows it, by name, across
// restarts; its "run folder" (run.out_dir) holds its checkpoints; the config's
// "run" section holds the job's settings. A "step" is one optimizer step
// (schedule.h says how steps are counted).
#pragma once

#include "trainer/config/config.h"
#include "trainer/config/faults.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hlat {

class StepHook;
struct RunContext;

struct TrainOptions {
    int steps = 0;                   // train until this many optimizer steps in total; 0: schedule.total_steps
    bool resume = false;             // continue from the latest good checkpoint of run.out_dir
    std::string resume_from;         // or from this checkpoint folder (rewind_skip's relaunch, replay)
    std::vector<long> skip_batches;  // batch indices of the stream never to train on (rewind_skip; with a resume)
    bool write_checkpoints = true;   // false: none, not even at the end (`hlat replay`)
    bool allow_data_change = false;  // resume even if the corpus, tokenizer or world size changed
    std::string init_weights;        // start from these weights (safetensors)
    std::string save_weights;        // write final weights here (safetensors)
    std::string metrics_jsonl;       // append start, step, eval and alert records here
    Faults faults;                   // to inject: parse_faults(config.run.inject), parsed once by the caller
    // Hooks of the caller's own, called after the run's (tests record the calls).
    std::vector<std::shared_ptr<StepHook>> extra_hooks;
    // Hooks of the caller's that need the run itself (its trainer, its
    // parallel layout: `hlat replay`), made once the run is built; called last.
    std::vector<std::function<std::shared_ptr<StepHook>(RunContext&)>> run_hooks;
};

// Exit code of a run that a detector halted. A supervisor must not restart it.
constexpr int kExitHalted = 3;
// Exit code of a run that a detector with the rewind_skip policy halted: the
// supervisor restarts it from the checkpoint the "rewind" event names, and
// skips the batches it lists.
constexpr int kExitRewind = 4;

// Runs the training described by config and options and returns the exit
// code: 0 when it reached its steps, kExitRewind (4) when a rewind_skip alert
// stopped it for the supervisor to restart, kExitHalted (3) when a detector with the
// halt policy (or a person on the page) stopped it, 128 + N when signal N
// (SIGINT, SIGTERM) stopped it, each after a checkpoint and with everything
// committed to the store. Throws with a message for the user on bad input
// (config, data, checkpoint); a failure during training is recorded as a
// crash in the store first.
int train(const TrainConfig& config, const TrainOptions& options);

}  // namespace hlat
