#include "trainer/run/session_hook.h"

#include "trainer/run/leak_probe.h"
#include "trainer/run/every.h"

#include <fmt/format.h>

namespace hlat {

// A mask bug is there from the first step: a fresh run probes before it, and
// its measurement goes to the session as a point of step 0 at once, so a leak
// halts the run before it trains. A resumed run does not probe, so that it
// raises what the uninterrupted run raised.
void SessionHook::on_start() {
    if (run_.first_step != 0 || run_.total_steps == 0) return;
    std::optional<double> leak = probe();
    session::RunSession* session = run_.recorder.session();
    if (!leak || !session) return;
    session::StepPoints points;
    points.add("causality_leak", *leak);
    session->step(0, points);
    probed_step_0_ = true;
    run_.halt_reason = session->halt_reason();
}

void SessionHook::after_step(StepResult& result) {
    const int64_t step = result.stats.step;
    if (every(run_.config.detectors.leak_probe.every, step + 1) && !(step == 0 && probed_step_0_))
        if (std::optional<double> leak = probe()) result.points.add("causality_leak", *leak);
    session::RunSession* session = run_.recorder.session();
    if (!session) return;
    session->step(step, result.points);
    if (std::optional<std::string> who = session->poll_halt_request()) {
        const std::string message = fmt::format("halt requested by {}", *who);
        session->raise({"halt_request", "critical", step, message, nlohmann::json{{"requested_by", *who}}.dump(), 0.0},
                       detectors::Policy::Halt, fmt::format("halt_request at step {}: {}", step, message));
    }
    run_.halt_reason = session->halt_reason();
    run_.rewinding = !session->rewind_plan().is_null();
}

std::optional<double> SessionHook::probe() {
    if (run_.config.detectors.leak_probe.policy == detectors::Policy::Off) return std::nullopt;
    return probe_causality(run_.trainer.model());
}

nlohmann::json SessionHook::state() const {
    session::RunSession* session = run_.recorder.session();
    return session ? session->detector_state() : nlohmann::json();
}

void SessionHook::restore(const nlohmann::json& state) {
    if (session::RunSession* session = run_.recorder.session()) session->restore_detectors(state);
}

}  // namespace hlat
