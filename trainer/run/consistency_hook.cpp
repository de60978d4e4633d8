#include "trainer/run/consistency_hook.h"

#include "trainer/parallel/replica_check.h"
#include "trainer/run/schedule.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace hlat {

void ConsistencyHook::before_step(int step, StepRequest& request) {
    // The gradients exist only during the step that the check follows.
    const ParallelConfig& pc = run_.config.parallel;
    if (pc.hash_grads && every(pc.check_every, step + 1)) request.hash_grads = true;
}

void ConsistencyHook::after_step(StepResult& result) {
    const ParallelConfig& pc = run_.config.parallel;
    const int done = result.stats.step + 1;
    const bool check = every(pc.check_every, done), resync = every(pc.resync_every, done);
    if (run_.parallel.dp_size() > 1 && check) check_replicas(result);
    if (run_.parallel.tp_size() > 1 && (check || resync)) check_tp_drift(result, check, resync);
}

// The replica check's verdict is a point (ranks that differ) and, when some
// do, an event naming them and the first tensor: the detector reads both.
void ConsistencyHook::check_replicas(StepResult& result) {
    Parallel& parallel = run_.parallel;
    Model& model = run_.trainer.model();
    ReplicaReport params = hlat::check_replicas(parallel, model, model.params());
    if (!parallel.is_root()) return;
    double mismatched = (double)params.mismatched_ranks.size();
    std::string detail = params.ok() ? "" : params.describe("parameters");
    if (const std::optional<ReplicaReport>& grads = result.stats.grad_replicas) {
        result.points.add("replica_grad_mismatch", (double)grads->mismatched_ranks.size());
        if (!grads->ok()) {
            mismatched = std::max(mismatched, (double)grads->mismatched_ranks.size());
            detail += (detail.empty() ? "" : "; ") + grads->describe("reduced gradients");
        }
    }
    result.points.add("replica_mismatch", mismatched);
    if (!detail.empty()) result.points.note("replica_mismatch", detail);
}

void ConsistencyHook::check_tp_drift(StepResult& result, bool check, bool resync) {
    Parallel& parallel = run_.parallel;
    const int64_t step = result.stats.step;
    DriftReport drift = measure_tp_drift(parallel, run_.trainer.model(), resync);
    if (parallel.is_root() && check) {
        result.points.add("tp_drift", drift.max_abs);
        result.points.add("tp_drift_rel", drift.max_rel);
        for (const auto& [name, value] : drift.per_tensor) result.points.add("tp_drift/" + name, value);
        run_.recorder.rank_metrics(step, "tp_drift", drift.per_rank);
    }
    if (resync) spdlog::info("step {}: replicated weights re-synced from tensor-parallel rank 0", step + 1);
}

}  // namespace hlat
