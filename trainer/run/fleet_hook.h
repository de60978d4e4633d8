// Fleet health during a distributed run (issue 21). Every step, each rank's
// compute time, communication wait and data wait are gathered at rank 0,
// stored as rank metrics, and summarised for the straggler detector (the
// slowest rank's compute over the median of the others'). Every
// parallel.health_every steps, between steps, every rank runs GEMMs of exact
// integers (wrong numbers are silent data corruption) and times a 1 MB
// all-reduce; failures go to the health_check detector with the step.
#pragma once

#include "detectors/stragglers.h"
#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

#include <string>
#include <vector>

namespace hlat {

class FleetHook : public StepHook {
  public:
    explicit FleetHook(RunContext& run);
    const char* name() const override { return "fleet"; }
    void after_step(StepResult& result) override;

  private:
    void record_rank_times(StepResult& result);
    void health_check(StepResult& result);

    RunContext& run_;
    std::vector<std::string> hosts_;  // by world rank, at rank 0
};

}  // namespace hlat
