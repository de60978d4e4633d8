// Detection for runs that hlat does not train, fed from outside: `hlat ingest`
// (a file, or --follow), POST /api/v1/runs/{run}/ingest and the Python client.
// Each batch goes through the run's detectors before the writer gets it; the
// alerts are stored with the batch and posted to the run's webhook, exactly
// as `hlat train` does, and an alert whose policy is halt files a halt
// request for the run that the feeder passes on (the HTTP reply, ingest
// --follow's --on-halt). Online equals offline: `hlat detect` replaying the
// stored run raises the same alerts, also when a step is cut across batches
// (a followed log read mid-step, a client that flushes by size): the step a
// batch ends with is held open, and when the next batch brings more of it the
// detectors go back to where they were before it and see it once, whole
// (an alert its first part already raised is not raised again, and keeps the
// numbers of that part).
#pragma once

#include "detectors/detector.h"
#include "detectors/webhook.h"
#include "telemetry/reader.h"
#include "telemetry/writer.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hlat::detectors {

// The run's detector settings: its config's "detectors" section, or the
// defaults. Throws DetectorConfigError for a bad section.
DetectorsConfig detectors_of(const telemetry::RunRecord& run);

class RunMonitor {
  public:
    // Records the run already has (a resumed run, a restarted server) are
    // replayed first, raising nothing, so that windows are as full as if
    // the detectors had never stopped.
    RunMonitor(telemetry::Writer& writer, telemetry::Reader& stored, const telemetry::RunRecord& run);
    ~RunMonitor();
    RunMonitor(const RunMonitor&) = delete;

    // Detects over the batch, then queues its points, events and alerts (not
    // flushed). Returns the alerts raised.
    std::vector<Fired> ingest(std::vector<telemetry::MetricPoint> points, std::vector<telemetry::Event> events = {});
    // Whether any record so far had a key the detectors read.
    bool watched() const { return watched_; }
    // The first halt-policy alert, as a sentence; empty while none fired.
    const std::string& halt_reason() const { return halt_reason_; }

  private:
    // The last step seen, which the next batch may carry more of: the
    // detectors' state before it, and the alerts it raised (not raised again).
    struct OpenStep {
        StepRecord record;
        nlohmann::json before;
        std::set<std::string> raised;
    };
    std::vector<Fired> observe(std::vector<StepRecord> records);

    telemetry::Writer& writer_;
    int64_t run_;
    DetectorSuite suite_;
    std::unique_ptr<Webhook> webhook_;
    bool watched_ = false;
    std::string halt_reason_;
    std::optional<OpenStep> open_;
};

}  // namespace hlat::detectors
