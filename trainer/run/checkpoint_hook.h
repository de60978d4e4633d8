// Checkpoints of a run: every run.checkpoint_every steps and at its end. The
// periodic one is written before the next step begins (the state is the
// same as right after the last one), so a run that ends at that step instead,
// halted, stopped or finished, writes only its final one. Each holds the
// position of every data-parallel stream and the state of every hook.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

class CheckpointHook : public StepHook {
  public:
    CheckpointHook(RunContext& run, const StepHooks& hooks) : run_(run), hooks_(hooks) {}
    const char* name() const override { return "checkpoint"; }
    void before_step(int step, StepRequest& request) override;
    void on_end(RunEnd how) override;

  private:
    void save();  // collective: every rank calls it

    RunContext& run_;
    const StepHooks& hooks_;
};

}  // namespace hlat
