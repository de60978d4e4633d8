// The consistency checks of a distributed run, every parallel.check_every
// steps: data-parallel replica hashes of the parameters (and, with
// parallel.hash_grads, of the reduced gradients, hashed during the step) and
// tensor-parallel drift of the replicated weights; and the re-sync of those
// weights every parallel.resync_every steps. Rank 0 adds what it finds to the
// step's points.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

class ConsistencyHook : public StepHook {
  public:
    // Throws, on every rank alike, when a replica_drift fault names a weight
    // this layout does not replicate.
    explicit ConsistencyHook(RunContext& run);
    const char* name() const override { return "consistency"; }
    void before_step(int step, StepRequest& request) override;
    void after_step(StepResult& result) override;

  private:
    void check_replicas(StepResult& result);
    void check_tp_drift(StepResult& result, bool check, bool resync);
    // The replica_drift fault: the last TP rank's copy of one replicated piece moved by 0.05.
    void inject_replica_drift(int step);
    std::string drift_fault_tensor_;  // the replica_drift fault's weight, resolved at the start

    RunContext& run_;
};

}  // namespace hlat
