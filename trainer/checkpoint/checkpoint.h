// Checkpoints: one folder per step under RUN_DIR/checkpoints, written to a
// temporary folder, fsynced and renamed into place, so a crash never leaves a
// partial checkpoint under a real name. Each holds
//   model.safetensors      weights (names as in weights.h)
//   optimizer.safetensors  AdamW moments exp_avg, exp_avg_sq (flat) and its step count
//   state.json             step, tokens seen, loader states (one per data-parallel rank), config,
//                          fingerprints, data- and tensor-parallel sizes, the run's hook state
//                          (the detectors' windows)
// A distributed run writes the whole model here too (gathered from its shards
// by rank 0), so a checkpoint loads at any parallel layout.
//   tokenizer.model        when the run uses one, so the folder stands alone
//   manifest.json          sha256 of every file above, written last
#pragma once

#include "trainer/data/loader.h"
#include "trainer/model/model.h"
#include "trainer/model/optimizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace hlat {

struct CheckpointState {
    int step = 0;              // optimizer steps taken
    long tokens_seen = 0;
    nlohmann::json config;     // the full training config
    std::optional<LoaderState> loader;  // of data-parallel rank 0
    std::vector<LoaderState> loaders;   // of every data-parallel rank, in rank order
    std::string corpus_fingerprint, tokenizer_fingerprint;
    int world_size = 1;                 // data-parallel replicas
    int tp_size = 1;
    nlohmann::json hooks;      // the training run's step hooks' state by hook name (null: none saved)
};

// Writes a checkpoint and deletes all but the newest `keep` (0 keeps all).
// Returns the folder written.
std::string save_checkpoint(const std::string& run_dir, const Model& model, AdamW& optimizer,
                            const CheckpointState& state, const std::string& tokenizer_path, int keep);

// The checkpoint folders under `root` (RUN_DIR/checkpoints), oldest first: only
// names step_NNNNNNNN, never a folder still being written (*.tmp-PID) or one
// being replaced (*.old-PID). Whether one is complete, verify_checkpoint says.
std::vector<std::filesystem::path> checkpoint_dirs(const std::filesystem::path& root);

// Checks that every file of the manifest is present with its sha256; throws
// naming the first problem.
void verify_checkpoint(const std::string& dir);

// The newest checkpoint of the run that verifies; every one skipped on the way
// is described in *skipped. Empty when there is none.
// With at_most_step, the newest whose step (steps done) is at most that: where rewind_skip restarts.
std::optional<std::string> latest_good_checkpoint(const std::string& run_dir, std::vector<std::string>* skipped,
                                                  int at_most_step = std::numeric_limits<int>::max());

// Reads state.json of a verified checkpoint.
CheckpointState read_checkpoint_state(const std::string& dir);
// Loads weights and optimizer state into an already built model and optimizer.
void load_checkpoint(const std::string& dir, Model& model, AdamW& optimizer);

}  // namespace hlat
