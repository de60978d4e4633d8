// Everything a training run records, in one place: the store (the run record
// with full config, git revision and host; per-step metrics; held-out
// losses; checkpoints; alerts; the events uptime is computed from: start,
// restart, heartbeat, checkpoint, stop, crash) and the optional metrics
// JSONL file (start, step, eval and alert records). Only world rank 0
// records; on other ranks every call does nothing. The store's I/O runs on
// telemetry::Writer's own thread.
#pragma once

#include "telemetry/reader.h"
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
    // registers the run; with resume, an existing run of the same name is
    // continued. Appends to metrics_jsonl when one is named. Records nothing
    // when `root` is false, and nothing to a store named "".
    // `meta`: what the run says of itself beyond its config (telemetry/records.h).
    RunRecorder(const TrainConfig& config, const nlohmann::json& meta, bool resume, int first_step,
                const std::string& metrics_jsonl, bool root);
    ~RunRecorder();

    bool store_enabled() const { return writer_ != nullptr; }
    // The JSONL file's first record of this process: `info` plus "event": "start".
    void start(nlohmann::json info);
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
    void jsonl(const nlohmann::json& record, bool flush);

    std::unique_ptr<telemetry::Writer> writer_;
    std::unique_ptr<telemetry::Reader> reader_;  // polls for halt requests
    int64_t run_id_ = 0;
    double last_heartbeat_ = 0.0;
    ProcessUsage usage_;  // the system panel's CPU % and memory
    std::ofstream jsonl_;
};

// The run's name in the store: run.name, or the folder name of run.out_dir.
std::string run_name(const TrainConfig& config);
// The hlat revision this binary was built from (git describe), "unknown" outside git.
const char* git_revision();

}  // namespace hlat
