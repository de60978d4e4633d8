// The faults that hit a whole process rather than the numbers: a rank killed
// (crash@S[:RANK], crash_random@SECONDS) or stopping to respond (hang@S[:RANK]).
// They are how the supervisor (`hlat run`) and the uptime bench are tested.
#pragma once

#include "trainer/faults.h"

#include <chrono>

namespace hlat {

class ProcessFaults {
  public:
    // attempt: how many times the supervisor relaunched the job (HLAT_ATTEMPT;
    // 0 when unsupervised). Step-triggered faults fire only on attempt 0.
    ProcessFaults(const Faults& faults, int world_rank, int attempt);
    // Called before each step: kills this process (SIGKILL, no cleanup, as a
    // machine failure would) or hangs it forever when a fault says so.
    void before_step(int step);
    static int attempt_from_env();

  private:
    Faults faults_;
    int rank_;
    bool first_attempt_;
    std::chrono::steady_clock::time_point crash_deadline_;
    bool random_crash_ = false;
};

}  // namespace hlat
