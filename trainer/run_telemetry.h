// What a training run tells the store: the run record (full config, git
// revision, host), per-step metrics, held-out losses, checkpoints, and the
// events uptime is computed from (start, restart, heartbeat, checkpoint, stop,
// crash). A thin adapter over telemetry::Writer, which does the I/O on its own
// thread.
#pragma once

#include "telemetry/reader.h"
#include "telemetry/writer.h"
#include "trainer/config.h"
#include "trainer/process_usage.h"
#include "trainer/trainer.h"

#include <memory>
#include <optional>
#include <string>

namespace hlat {

class RunTelemetry {
  public:
    // Opens the store named by config.run.store (creating its folder) and
    // registers the run; with resume, an existing run of the same name is
    // continued. Does nothing when the store is disabled ("").
    RunTelemetry(const TrainConfig& config, bool resume, int first_step);
    ~RunTelemetry();

    bool enabled() const { return writer_ != nullptr; }
    void step(const StepStats& s);
    void heldout_loss(int64_t step, double loss, int64_t tokens_seen);
    // Further series of a step (TP drift, replica checks), and one value per
    // rank of a key.
    void metrics(int64_t step, const std::vector<std::pair<std::string, double>>& values);
    void rank_metrics(int64_t step, const std::string& key, const std::vector<double>& per_rank);
    // An event besides the lifecycle ones, e.g. "replica_mismatch" with its detail.
    void note(const std::string& kind, int64_t step, const std::string& detail);
    // Waits until every step so far is committed. Called before a checkpoint is
    // written, so the store never lags behind the newest checkpoint: a run
    // resumed after a SIGKILL then finds no gap in its series.
    void flush();
    void checkpoint(int64_t step, const std::string& path);
    void alert(const telemetry::Alert& alert);
    // Who asked (from the web page) for this run to halt, if anyone has since
    // the last call; the request is then marked handled.
    std::optional<std::string> halt_requested();
    // Ends the run: status finished, stopped, halted or crashed, with its event.
    void finish(const std::string& status, int64_t step, const std::string& detail);
    // Rows written, commits and waits on a full queue, for the closing log line.
    std::string summary() const;

  private:
    void event(const std::string& kind, int64_t step, const std::string& detail = "");

    std::unique_ptr<telemetry::Writer> writer_;
    std::unique_ptr<telemetry::Reader> reader_;  // polls for halt requests
    int64_t run_ = 0;
    double last_heartbeat_ = 0.0;
    ProcessUsage usage_;  // the system panel's CPU % and memory
};

// The run's name in the store: run.name, or the folder name of run.out_dir.
std::string run_name(const TrainConfig& config);
// The hlat revision this binary was built from (git describe), "unknown" outside git.
const char* git_revision();

}  // namespace hlat
