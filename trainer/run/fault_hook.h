// The faults that hit a whole process rather than the numbers: a rank killed
// (crash@S[:RANK], crash_random@SECONDS) or stopping to respond (hang@S[:RANK]).
// They are how the supervisor (`hlat run`) and the uptime bench are tested.
#pragma once

#include "trainer/config/faults.h"
#include "trainer/run/step_hook.h"

#include <chrono>

namespace hlat {

// The last hook of a run: before a step, after every other hook (so the
// step's checkpoint is on disk), it kills this process (SIGKILL, no cleanup,
// as a machine failure would) or hangs it forever when a fault says so.
class FaultHook : public StepHook {
  public:
    // attempt: how many times the supervisor relaunched the job (HLAT_ATTEMPT;
    // 0 when unsupervised). Step-triggered faults fire only on attempt 0.
    FaultHook(const Faults& faults, int world_rank, int attempt);
    const char* name() const override { return "faults"; }
    void before_step(int step, StepRequest& request) override;
    static int attempt_from_env();

  private:
    Faults faults_;
    int rank_;
    bool first_attempt_;
    std::chrono::steady_clock::time_point crash_deadline_;
    bool random_crash_ = false;
};

}  // namespace hlat
