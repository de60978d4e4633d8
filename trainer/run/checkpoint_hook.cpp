#include "trainer/run/checkpoint_hook.h"

#include "trainer/checkpoint/distributed_checkpoint.h"
#include "trainer/run/every.h"

#include <spdlog/spdlog.h>

namespace hlat {

void CheckpointHook::before_step(int step, StepRequest&) {
    if (!run_.options.write_checkpoints) return;
    // `step` steps are done; none since the start is the checkpoint resumed from.
    if (every(run_.config.run.checkpoint_every, step) && step > run_.first_step) save();
}

void CheckpointHook::on_end(RunEnd how) {
    if (!run_.options.write_checkpoints) return;
    if (how == RunEnd::Finished || how == RunEnd::Stopped) return save();
    if (how != RunEnd::Halted) return;  // after a crash the other ranks may be gone
    // rewind_skip restarts from an earlier checkpoint: these weights have
    // taken the bad batch, and a newer checkpoint could push a good one out.
    if (run_.rewinding) return;
    // Keep the state if it is still finite (a skipped update leaves it so).
    const Model& model = run_.trainer.model();
    int nonfinite = std::isfinite(l2_norm(model.params(), model.num_parameters())) ? 0 : 1;
    if (run_.parallel.max(nonfinite, Group::World) == 0)  // every rank agrees: the checkpoint is collective
        save();
    else
        spdlog::error("no checkpoint at the halt: the weights are not finite; the last good one stays");
}

void CheckpointHook::save() {
    Parallel& parallel = run_.parallel;
    RunData& data = run_.data;
    CheckpointState st;
    st.step = run_.trainer.next_step();
    st.tokens_seen = run_.trainer.tokens_seen();
    st.config = config_to_json(run_.config);
    st.corpus_fingerprint = data.corpus_fingerprint();
    st.tokenizer_fingerprint = data.tokenizer_fingerprint();
    st.world_size = parallel.dp_size();
    st.tp_size = parallel.tp_size();
    st.hooks = hooks_.state();
    // Every data-parallel rank's stream position; TP ranks of a replica share theirs.
    std::vector<std::string> states =
        parallel.gather(data.loader ? data.loader->state().to_json().dump() : std::string(), Group::World);
    if (data.loader && parallel.is_root()) {
        for (size_t r = 0; r < states.size(); r += parallel.tp_size())
            st.loaders.push_back(LoaderState::from_json(nlohmann::json::parse(states[r])));
        st.loader = st.loaders.front();
    }
    run_.recorder.flush();
    std::string tokenizer = data.tokenizer ? data.tokenizer->path() : "";
    std::string dir = save_distributed_checkpoint(parallel, run_.trainer, st, run_.config.run.out_dir, tokenizer,
                                                  run_.config.run.keep_checkpoints);
    if (!parallel.is_root()) return;
    run_.recorder.checkpoint(st.step - 1, dir);
    spdlog::info("checkpoint {}", dir);
}

}  // namespace hlat
