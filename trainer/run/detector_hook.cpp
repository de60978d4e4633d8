#include "trainer/run/detector_hook.h"

#include "trainer/run/leak_probe.h"
#include "trainer/run/schedule.h"

#include <fmt/format.h>

namespace hlat {

// A mask bug is there from the first step: a fresh run probes before it. A
// resumed run does not, so that it raises what the uninterrupted run raised.
void DetectorHook::on_start() {
    if (run_.first_step == 0 && run_.total_steps > 0) probe(0);
}

void DetectorHook::after_step(StepResult& result) {
    const int64_t step = result.stats.step;
    for (detectors::Fired& f : suite_.observe(result.record)) run_.alerts.raise(std::move(f.alert), f.policy);
    if (every(run_.config.detectors.leak_probe.every, step + 1)) probe(step);
    if (!run_.parallel.is_root()) return;
    if (std::optional<std::string> who = run_.recorder.halt_requested())
        run_.alerts.raise({"halt_request", "critical", step, fmt::format("halt requested by {}", *who),
                           nlohmann::json{{"requested_by", *who}}.dump(), 0.0},
                          detectors::Policy::Halt);
}

// Every rank runs the probe (a tensor-parallel forward is collective).
void DetectorHook::probe(int64_t step) {
    const detectors::LeakProbeConfig& config = run_.config.detectors.leak_probe;
    if (config.policy == detectors::Policy::Off) return;
    if (std::optional<telemetry::Alert> leak = probe_causality(run_.trainer.model(), step))
        run_.alerts.raise(*leak, config.policy);
}

}  // namespace hlat
