// The build phase of a training run: the parallel layout, the resume
// decision, the data at its resumed position, the trainer and its weights
// (a checkpoint's, --init's or fresh), the banner, the recorder (with the
// run session) and the step hooks in their calling order, restored from the
// checkpoint when resuming. Owns everything the run's context refers to.
#pragma once

#include "trainer/run/resume.h"
#include "trainer/run/run_context.h"
#include "trainer/run/step_hook.h"

#include <memory>
#include <optional>

namespace hlat {

class BuiltRun {
  public:
    BuiltRun(const TrainConfig& config, const TrainOptions& options);
    ~BuiltRun();
    RunContext& context() { return *context_; }
    StepHooks& hooks() { return hooks_; }

  private:
    void build_trainer(const TrainConfig& config, const TrainOptions& options);
    void add_hooks(const TrainOptions& options);
    nlohmann::json run_meta() const;

    Parallel parallel_;
    std::optional<Resume> resume_;
    std::unique_ptr<RunData> data_;
    double peak_gflops_ = 0.0;
    bool peak_measured_ = false;
    std::unique_ptr<Trainer> trainer_;
    std::unique_ptr<RunRecorder> recorder_;
    std::unique_ptr<RunContext> context_;
    StepHooks hooks_;
};

// The lines at the start of a run that say what it is: threads, precision,
// model, the parallel layout's share of it, batch, activations, FLOPs.
void log_banner(const RunContext& run, double peak_gflops, bool peak_measured);

}  // namespace hlat
