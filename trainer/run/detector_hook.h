// The detectors of a run: each step's record (filled by the hooks before this
// one) through the detector suite; the causality probe at the start of a
// fresh run and every detectors.leak_probe.every steps; halt requests from
// the page. Everything they raise goes through the run's AlertRouter. The
// detectors' windows are this hook's state, kept in checkpoints.
#pragma once

#include "detectors/detector.h"
#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

namespace hlat {

class DetectorHook : public StepHook {
  public:
    explicit DetectorHook(RunContext& run) : run_(run), suite_(run.config.detectors) {}
    const char* name() const override { return "detectors"; }
    void on_start() override;
    void after_step(StepResult& result) override;
    nlohmann::json state() const override { return suite_.state(); }
    void restore(const nlohmann::json& state) override { suite_.restore(state); }

  private:
    void probe(int64_t step);

    RunContext& run_;
    detectors::DetectorSuite suite_;
};

}  // namespace hlat
