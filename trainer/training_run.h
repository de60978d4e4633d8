// A whole training run as `hlat train` performs it: data (token file, or corpus
// through the online loader with a held-out set), model and optimizer, resume
// from the latest good checkpoint, periodic held-out evaluation and
// checkpoints, progress lines through spdlog and an optional JSONL record.
#pragma once

#include "trainer/config.h"

#include <string>

namespace hlat {

struct RunOptions {
    int steps = 0;                   // train until this many optimizer steps in total; 0: schedule.total_steps
    bool resume = false;             // continue from the latest good checkpoint of run.out_dir
    bool allow_data_change = false;  // resume even if the corpus, tokenizer or world size changed
    std::string init_weights;        // start from these weights (safetensors)
    std::string save_weights;        // write final weights here (safetensors)
    std::string metrics_jsonl;       // append start, step and eval records here
};

// Exit code of a run that a detector halted. A supervisor must not restart it.
constexpr int kExitHalted = 3;

// Runs the training described by config and options and returns the exit code:
// 0 when it reached its steps, kExitHalted (3) when a detector with the halt
// policy stopped it, 128 + N when signal N (SIGINT, SIGTERM) stopped it, after a checkpoint and with everything committed to the store. Throws
// with a message for the user on bad input (config, data, checkpoint); a
// failure during training is recorded as a crash in the store first.
int run_training(const TrainConfig& config, const RunOptions& options);

}  // namespace hlat
