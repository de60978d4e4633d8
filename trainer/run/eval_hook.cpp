#include "trainer/run/eval_hook.h"

#include "trainer/run/every.h"

#include <spdlog/spdlog.h>

#include <cmath>

namespace hlat {

// The last step of the run is evaluated with its step, so the held-out loss
// reaches the detectors with the rest of that step's points.
void EvalHook::after_step(StepResult& result) {
    const int every_n = run_.config.run.eval_every, done = result.stats.step + 1;
    if (!every(every_n, done) && !(every_n > 0 && done == run_.total_steps)) return;
    const double loss = evaluate();
    if (!std::isnan(loss)) result.points.add("heldout_loss", loss);
    evaluated_after_ = done;
}

// A run stopped by a signal between evaluations gets a final one, kept as an
// eval record only: its step was already detected, and an uninterrupted run
// never had this evaluation, so the detectors do not see it.
void EvalHook::on_end(RunEnd how) {
    const int done = run_.trainer.next_step();
    if (how != RunEnd::Stopped || done == run_.first_step || run_.config.run.eval_every <= 0 ||
        evaluated_after_ == done)
        return;
    evaluate();
}

double EvalHook::evaluate() {
    RunData& data = run_.data;
    if (data.eval_batches.empty()) return NAN;
    const int B = run_.config.run.batch_size, T = run_.config.run.seq_len;
    const int64_t step = run_.trainer.next_step() - 1;
    double loss = heldout_loss(run_.trainer.model(), data.eval_batches, B, T);  // every rank: TP forward is collective
    spdlog::info("step {:>6} | held-out loss {:.4f} (unigram entropy {:.3f})", step + 1, loss,
                 data.heldout_unigram_entropy);
    run_.recorder.heldout_loss(step, loss, run_.trainer.tokens_seen());
    return loss;
}

}  // namespace hlat
