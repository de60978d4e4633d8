// Where every alert of the embedded trainer goes: the log, the store, the
// metrics JSONL, the webhook; one whose policy is halt ends the run after
// the current step. Detectors, the causality probe and halt requests from
// the page all raise through it. Only world rank 0 raises; the halt reason
// reaches the other ranks through the loop's stop agreement.
#pragma once

#include "detectors/config.h"
#include "detectors/webhook.h"
#include "telemetry/records.h"
#include "trainer/run/run_recorder.h"

#include <memory>
#include <string>

namespace hlat {

class AlertRouter {
  public:
    AlertRouter(RunRecorder& recorder, const std::string& webhook_url, const std::string& run_name, bool root);
    void raise(telemetry::Alert alert, detectors::Policy policy);
    bool halting() const { return !halt_reason_.empty(); }
    // The first halting alert, "" while none; the stop agreement sets it on
    // ranks other than 0.
    std::string& halt_reason() { return halt_reason_; }

  private:
    RunRecorder& recorder_;
    std::unique_ptr<detectors::Webhook> webhook_;
    bool root_;
    std::string halt_reason_;
};

}  // namespace hlat
