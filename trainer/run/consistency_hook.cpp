#include "trainer/run/consistency_hook.h"

#include "trainer/parallel/replica_check.h"
#include "trainer/run/every.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace hlat {

ConsistencyHook::ConsistencyHook(RunContext& run) : run_(run) {
    if (run.options.faults.replica_drift_at < 0) return;
    const Model& model = run.trainer.model();
    std::string name = run.options.faults.replica_drift_tensor;
    if (name.empty()) name = model.shard().shares_kv() ? "layers.0.k_proj" : "layers.0.input_layernorm";
    for (const ReplicatedPiece& piece : replicated_pieces(model))
        if (piece.name == name) drift_fault_tensor_ = name;
    if (drift_fault_tensor_.empty())
        throw std::runtime_error(fmt::format("fault replica_drift: {} is not a weight this layout replicates across "
                                             "tensor-parallel ranks (the norms: layers.L.input_layernorm, ...; "
                                             "shared kv heads: layers.L.k_proj, layers.L.v_proj)",
                                             name));
}

void ConsistencyHook::before_step(int step, StepRequest& request) {
    // The gradients exist only during the step that the check follows.
    const ParallelConfig& pc = run_.config.parallel;
    if (pc.hash_grads && every(pc.check_every, step + 1)) request.hash_grads = true;
}

void ConsistencyHook::after_step(StepResult& result) {
    const ParallelConfig& pc = run_.config.parallel;
    const int done = result.stats.step + 1;
    const bool check = every(pc.check_every, done), resync = every(pc.resync_every, done);
    if (run_.options.faults.replica_drift_at == result.stats.step) inject_replica_drift(result.stats.step);
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

void ConsistencyHook::inject_replica_drift(int step) {
    Parallel& parallel = run_.parallel;
    if (parallel.tp_rank() != parallel.tp_size() - 1) return;
    Model& model = run_.trainer.model();
    for (const ReplicatedPiece& piece : replicated_pieces(model)) {
        if (piece.name != drift_fault_tensor_) continue;
        float* w = model.params() + piece.offset;
        for (long i = 0; i < piece.count; i++) w[i] += 5e-2f;
        spdlog::warn("fault replica_drift: rank {} moved its copy of {} by 0.05 after step {}", parallel.world_rank(),
                     piece.name, step);
    }
}

// "layers.0.k_proj on rank 3": the tensor and the rank of the largest drift.
static std::string where_drifted_most(const DriftReport& drift) {
    auto tensor = std::max_element(drift.per_tensor.begin(), drift.per_tensor.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; });
    auto rank = std::max_element(drift.per_rank.begin(), drift.per_rank.end());
    return fmt::format("{} on rank {}", tensor->first, rank - drift.per_rank.begin());
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
        if (drift.max_abs > 0) result.points.note("tp_drift", where_drifted_most(drift));
    }
    if (resync) spdlog::info("step {}: replicated weights re-synced from their group leaders", step + 1);
}

}  // namespace hlat
