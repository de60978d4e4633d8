// Scoring checkpoints: one on demand (`hlat eval --checkpoint`), or each one
// of a run as it lands (`hlat eval --watch`), with results in the store's
// evals table next to the training curves.
#pragma once

#include "eval/tasks.h"

#include <atomic>
#include <string>
#include <vector>

namespace hlat::eval {

struct CheckpointEval {
    std::string dir;
    int step = 0;
    long tokens_seen = 0;
    std::vector<TaskResult> results;
    std::vector<std::string> warnings;  // e.g. tasks built from another corpus
};

// Verifies the checkpoint (a folder without its manifest, or whose files do
// not match it, is refused: it may still be being written), loads its model
// and tokenizer, and scores every task.
CheckpointEval evaluate_checkpoint(const std::string& dir, const std::vector<TaskFile>& tasks,
                                   const TaskOptions& options);

// The results as a table, one row per metric, and as JSON.
std::string format_results(const CheckpointEval& eval);
nlohmann::json results_to_json(const CheckpointEval& eval);

struct WatchOptions {
    std::string run_dir;
    std::string store;       // results go to its evals table
    std::string run_name;    // empty: the run_dir's folder name, as the trainer names runs
    double poll_seconds = 2.0;
    bool exit_when_done = false;  // stop once the run has ended and every checkpoint is scored
    // With exit_when_done: how long to wait for the run to appear in the
    // store before giving up (a misspelt --run must not wait forever).
    double wait_for_run_seconds = 120.0;
};

// Scores each complete checkpoint of run_dir/checkpoints not yet in the store,
// oldest first, until stop (or, with exit_when_done, until the run is over).
// stop is also looked at between the items of a checkpoint: a checkpoint cut
// short stores nothing. Returns the number of checkpoints scored whole.
int watch_run(const std::vector<TaskFile>& tasks, const WatchOptions& watch, const TaskOptions& options,
              const std::atomic<bool>& stop);

}  // namespace hlat::eval
