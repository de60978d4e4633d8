// The last recording hook: hands the step's points (everything the hooks
// before it measured) to the run session, which stores them and runs the
// detectors on them; runs the causality probe at the start of a fresh run
// and every detectors.leak_probe.every steps (its measurement is one more
// point, causality_leak); polls for halt requests from the page. The
// detectors' windows are this hook's state, kept in checkpoints.
#pragma once

#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

#include <optional>

namespace hlat {

class SessionHook : public StepHook {
  public:
    explicit SessionHook(RunContext& run) : run_(run) {}
    const char* name() const override { return "session"; }
    const char* former_name() const override { return "detectors"; }  // its key in checkpoints before the session
    void on_start() override;
    void after_step(StepResult& result) override;
    nlohmann::json state() const override;
    void restore(const nlohmann::json& state) override;

  private:
    std::optional<double> probe();  // every rank runs it (a tensor-parallel forward is collective)

    RunContext& run_;
    bool probed_step_0_ = false;  // before the first step: step 0's measurement, sent once
};

}  // namespace hlat
