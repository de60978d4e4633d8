// Everything a training run records, in one place: its run session (the run
// record with full config, git revision and host; every step's points,
// stored and detected as one; held-out losses; checkpoints; alerts; the
// events uptime is computed from: start, restart, heartbeat, checkpoint,
// stop, crash) and the optional metrics JSONL file (start, step, eval and
// alert records). Only world rank 0 records; on other ranks every call does
// nothing. The store's I/O runs on telemetry::Writer's own thread.
#pragma once

#include "session/run_session.h"
#include "telemetry/writer.h"
#include "trainer/config/config.h"
#include "trainer/run/process_usage.h"
#include "trainer/step_stats.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace hlat {

class RunRecorder {
  public:
    // Opens the store named by config.run.store (creating its folder) and
    // opens the run's session; with resume, an existing run of the same name
    // is continued. Appends to metrics_jsonl when one is named. Records
    // nothing when `root` is false. A store named "" keeps nothing, but the
    // session still runs the detectors (the log, the JSONL, the webhook, halts).
    // `meta`: what the run says of itself beyond its config (telemetry/records.h).
    RunRecorder(const TrainConfig& config, const nlohmann::json& meta, bool resume, int first_step,
                const std::string& metrics_jsonl, bool root);
    ~RunRecorder();

    bool store_enabled() const { return writer_ != nullptr; }
    // The run's session on rank 0; null on other ranks.
    session::RunSession* session() { return session_.get(); }
    // The JSONL file's first record of this process: `info` plus "event": "start".
    void start(nlohmann::json info);
    // The step's own metrics into its points (and the JSONL's step record).
    void step(const StepStats& s, session::StepPoints& points);
    // The held-out loss's eval record and JSONL line (its point goes with the step's).
    void heldout_loss(int64_t step, double loss, int64_t tokens_seen);
    void rank_metrics(int64_t step, const std::string& key, const std::vector<double>& per_rank);
    // Waits until every step so far is committed. Called before a checkpoint is
    // written, so the store never lags behind the newest checkpoint: a run
    // resumed after a SIGKILL then finds no gap in its series.
    void flush();
    void checkpoint(int64_t step, const std::string& path);
    // Ends the run: status finished, stopped, halted or crashed, with its event.
    void finish(const std::string& status, int64_t step, const std::string& detail);
    // Rows written, commits and waits on a full queue, for the closing log line.
    std::string summary() const;

  private:
    void jsonl(const nlohmann::json& record, bool flush);

    std::unique_ptr<telemetry::Writer> writer_;
    std::unique_ptr<session::RunSession> session_;
    ProcessUsage usage_;  // the system panel's CPU % and memory
    std::ofstream jsonl_;
};

// The run's name in the store: run.name, or the folder name of run.out_dir.
std::string run_name(const TrainConfig& config);
// The hlat revision this binary was built from (git describe), "unknown" outside git.
const char* git_revision();

}  // namespace hlat
