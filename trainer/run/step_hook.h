// Step hooks: each concern of a training run around the step itself
// (telemetry, held-out evaluation, consistency checks, detectors, checkpoints,
// faults) is one hook, and the loop calls every hook in a fixed order:
//
//   on_start()                       once, before the first step
//   before_step(step, request)       each step; may ask the step to measure more
//   after_step(result)               each step, in order: a hook adds what it
//                                    measured to the step's points, which the
//                                    session hook hands to the run session
//   on_end(how)                      once: finished, stopped, halted or crashed
//
// A hook that remembers something across steps (the detectors' windows) says
// so in state(); checkpoints keep it, and a resumed run restore()s it, so it
// acts exactly as in an uninterrupted run.
#pragma once

#include "session/run_session.h"
#include "trainer/step_stats.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace hlat {

enum class RunEnd { Finished, Stopped, Halted, Crashed };
const char* run_end_name(RunEnd end);  // "finished", "stopped", "halted", "crashed"

// What a hook may ask of the next step besides the usual.
struct StepRequest {
    bool tensor_norms = false;  // per-layer and per-kind norms
    bool hash_grads = false;    // the replica check of the reduced gradients
    // Sequences the step leaves out, per micro-batch a flag per row of this
    // rank's batch (`hlat replay --without`); empty: none.
    std::vector<std::vector<char>> drop_sequences;
};

// What a step produced, handed along the after-step hooks.
struct StepResult {
    const StepStats& stats;
    session::StepPoints points;  // everything measured at this step, by name: stored and detected as one
};

class StepHook {
  public:
    virtual ~StepHook() = default;
    virtual const char* name() const = 0;  // its key in a checkpoint's hook state
    virtual const char* former_name() const { return ""; }  // the key older checkpoints have it under
    virtual void on_start() {}
    virtual void before_step(int /*step*/, StepRequest& /*request*/) {}
    virtual void after_step(StepResult& /*result*/) {}
    // After a crash the other ranks may be gone: a hook then does nothing collective.
    virtual void on_end(RunEnd /*how*/) {}
    virtual nlohmann::json state() const { return nullptr; }
    virtual void restore(const nlohmann::json& /*state*/) {}
};

// The run's hooks in calling order.
class StepHooks {
  public:
    void add(std::shared_ptr<StepHook> hook) { hooks_.push_back(std::move(hook)); }
    void on_start();
    void before_step(int step, StepRequest& request);
    void after_step(StepResult& result);
    void on_end(RunEnd how);
    // {"session": ..., ...}: the hooks that have state, by name.
    nlohmann::json state() const;
    void restore(const nlohmann::json& state);

  private:
    std::vector<std::shared_ptr<StepHook>> hooks_;
};

}  // namespace hlat
