#include "trainer/run/telemetry_hook.h"

#include "trainer/run/every.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hlat {

static std::string format_duration(double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
    if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
    return fmt::format("{}s", s);
}

void TelemetryHook::before_step(int step, StepRequest& request) {
    if (every(run_.config.run.tensor_norms_every, step)) request.tensor_norms = true;
}

void TelemetryHook::after_step(StepResult& result) {
    const StepStats& s = result.stats;
    elapsed_ += s.step_seconds;
    data_wait_ += s.data_seconds;
    run_.recorder.step(s, result.points);
    const int done = s.step + 1;
    if (every(run_.config.run.log_every, done) || done == run_.total_steps) log_progress(s, done);
}

void TelemetryHook::log_progress(const StepStats& s, int done) const {
    const Parallel& parallel = run_.parallel;
    double eta = elapsed_ / (done - run_.first_step) * (run_.total_steps - done);
    std::string comm;
    if (parallel.dp_size() > 1)
        comm = fmt::format(" | DP comm {:.1f} ms, {:.0f}% hidden", 1e3 * s.comm_seconds,
                           s.comm_seconds > 0 ? 100.0 * (1.0 - s.comm_exposed_seconds / s.comm_seconds) : 0.0);
    if (parallel.tp_size() > 1)
        comm += fmt::format(" | TP comm {:.0f}% of the step", 100.0 * s.tp_comm_seconds / s.step_seconds);
    spdlog::info("step {:>6}/{} | loss {:.4f} | grad norm {:.4f}{} | param norm {:.2f} | lr {:.3e} | "
                 "{:.0f} tok/s | MFU {:.1f}%{} | data wait {:.1f}% | ETA {}",
                 done, run_.total_steps, s.loss, s.grad_norm, s.clipped ? " (clipped)" : "", s.param_norm, s.lr,
                 s.tokens_per_second, 100.0 * s.mfu, comm, 100.0 * s.data_seconds / s.step_seconds,
                 format_duration(eta));
}

void TelemetryHook::on_end(RunEnd how) {
    const int next = run_.trainer.next_step();
    if ((how == RunEnd::Finished || how == RunEnd::Stopped) && next > run_.first_step)
        spdlog::info("trained steps {}..{}: {:.1f} s, data wait {:.2f}% of step time", run_.first_step + 1, next,
                     elapsed_, elapsed_ > 0 ? 100.0 * data_wait_ / elapsed_ : 0.0);
}

}  // namespace hlat
