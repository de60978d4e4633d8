// Held-out evaluation every run.eval_every steps and after the last step (or
// when a signal stops the run between evaluations). The loss goes into the step's points
// (loss_below_heldout compares against it) and the eval records.
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
    int evaluated_after_ = -1;  // steps done at the last evaluation
};

}  // namespace hlat
