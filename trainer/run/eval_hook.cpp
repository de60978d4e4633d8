#include "trainer/run/eval_hook.h"

#include "trainer/run/schedule.h"

#include <spdlog/spdlog.h>

namespace hlat {

void EvalHook::after_step(StepResult& result) {
    if (every(run_.config.run.eval_every, result.stats.step + 1)) result.record.heldout_loss = evaluate();
}

void EvalHook::on_end(RunEnd how) {
    const int done = run_.trainer.next_step();
    const bool trained = done > run_.first_step;
    const bool evaluated_last = every(run_.config.run.eval_every, done);
    if ((how == RunEnd::Finished || how == RunEnd::Stopped) && trained && run_.config.run.eval_every > 0 &&
        !evaluated_last)
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
