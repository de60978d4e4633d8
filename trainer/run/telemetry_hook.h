// The first hook of a run: asks for tensor norms every run.tensor_norms_every
// steps, sends each step's metrics to the recorder (store and metrics JSONL)
// and prints the progress line every run.log_every steps.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

class TelemetryHook : public StepHook {
  public:
    explicit TelemetryHook(RunContext& run) : run_(run) {}
    const char* name() const override { return "telemetry"; }
    void before_step(int step, StepRequest& request) override;
    void after_step(StepResult& result) override;
    void on_end(RunEnd how) override;

  private:
    void log_progress(const StepStats& s, int done) const;

    RunContext& run_;
    double elapsed_ = 0.0, data_wait_ = 0.0;  // seconds of this process's steps
};

}  // namespace hlat
