// Resuming a run from its latest good checkpoint: which one, whether this
// run may continue it, and where each data-parallel stream picks up.
#pragma once

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config.h"
#include "trainer/run/run_data.h"

#include <optional>
#include <string>

namespace hlat {

struct Resume {
    std::string dir;        // the checkpoint folder
    CheckpointState state;  // its state.json
};

// The newest checkpoint of run.out_dir that verifies (each one skipped on the
// way is logged), or nothing.
std::optional<Resume> find_resume(const TrainConfig& config);

// Refuses a resume whose model, data or parallel layout differ from the
// checkpoint's, unless the user allowed a data change.
void check_resumable(const TrainConfig& config, const CheckpointState& ck, const RunData& data, bool allow_data_change,
                     const std::string& dir);

// Where this data-parallel rank's stream resumes: its own saved state, or,
// when the world size changed (allowed by --allow-data-change), the start of
// the epoch after the newest one any rank had reached.
std::optional<LoaderState> resume_loader_state(const CheckpointState& ck, int dp_rank, int dp_size);

}  // namespace hlat
