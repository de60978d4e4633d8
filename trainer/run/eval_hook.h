// Held-out evaluation every run.eval_every steps, and once more at the end of
// a run that trained since its last one. The loss goes to the recorder and
// into the detectors' record (loss_below_heldout compares against it).
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

class EvalHook : public StepHook {
  public:
    explicit EvalHook(RunContext& run) : run_(run) {}
    const char* name() const override { return "eval"; }
    void after_step(StepResult& result) override;
    void on_end(RunEnd how) override;

  private:
    double evaluate();  // NaN when there is no held-out set

    RunContext& run_;
};

}  // namespace hlat
